package delegate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// hangingPlugin writes a plugin that starts a child of its own (a sleep, as a
// plugin runs iptables that waits on the xtables lock), writes "<its pid>
// <child's pid>" to the returned file, and then waits for the child: it hangs
// before it reads stdin. The test's cleanup kills whatever of the two is left,
// so that a failing test leaves nothing either.
func hangingPlugin(t *testing.T, dir string) (path, pidFile string) {
	t.Helper()
	path, pidFile = filepath.Join(dir, "hang"), filepath.Join(dir, "pids")
	script := fmt.Sprintf("#!/bin/sh\nsleep 600 &\necho \"$$ $!\" > %[1]s.tmp\nmv %[1]s.tmp %[1]s\nwait\n", pidFile)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range readPids(pidFile) {
			if running(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return path, pidFile
}

func readPids(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitPids waits for the plugin's pid file: the plugin and its child run.
func waitPids(t *testing.T, file string) []int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if pids := readPids(file); len(pids) == 2 {
			return pids
		}
	}
	t.Fatalf("the hanging plugin never wrote its pids to %s", file)
	return nil
}

// running reports whether pid is a process that has not exited (a zombie has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func stillRunning(pids []int) []int {
	var out []int
	for _, p := range pids {
		if running(p) {
			out = append(out, p)
		}
	}
	return out
}

// TestKilledPluginTakesItsGroup: a plugin killed because its call ended (the
// callTimeout, or the runtime hung up) dies with the process it started, and
// ExecPlugin returns only once both are gone. Before, only the plugin got
// SIGKILL, and its child ran on with whatever it held.
func TestKilledPluginTakesItsGroup(t *testing.T) {
	// The config is written from the call's own goroutine (give): one larger
	// than a pipe holds, to a plugin that never reads it, blocks that write
	// until the kill ends the plugin, and the call must still end.
	for name, stdin := range map[string][]byte{"small config": []byte(`{}`), "config larger than the pipe, never read": bytes.Repeat([]byte(" "), 1<<20)} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, pidFile := hangingPlugin(t, dir)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				for deadline := time.Now().Add(30 * time.Second); len(readPids(pidFile)) < 2 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				cancel(errors.New("the test ended the call"))
			}()
			c := call(path, "ADD", "net1")
			_, err := (&Exec{Busy: idle}).ExecPlugin(ctx, path, stdin, c.Env)
			var te *types.Error
			if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "the test ended the call") {
				t.Fatalf("ExecPlugin = %v, want code 11 naming the cause", err)
			}
			pids := readPids(pidFile)
			if len(pids) != 2 {
				t.Fatalf("pids %v", pids)
			}
			if left := stillRunning(pids); len(left) > 0 {
				t.Errorf("processes of the killed plugin still running when ExecPlugin returned: %v (plugin, child: %v)", left, pids)
			}
		})
	}
}

// TestUnusedEarlyStartTakesItsGroup: a process started before its turn that
// never gets it (here Close; likewise a call that went another way, or the
// guard) is killed with what it started before it read its stdin.
func TestUnusedEarlyStartTakesItsGroup(t *testing.T) {
	dir := t.TempDir()
	path, pidFile := hangingPlugin(t, dir)
	e := &Exec{Busy: idle}
	e.Expect([]Call{call(path, "ADD", "net1")})
	pids := waitPids(t, pidFile)
	e.Close()
	if left := stillRunning(pids); len(left) > 0 {
		t.Errorf("processes of the unused early start still running after Close: %v (plugin, child: %v)", left, pids)
	}
	if s := e.Stats(); s.Started != 1 || s.Discarded != 1 {
		t.Errorf("stats %+v, want 1 started and discarded", s)
	}
}

// TestKillAll: the groups of the delegates still running are killed and
// waited for (the daemon's last step at shutdown).
func TestKillAll(t *testing.T) {
	dir := t.TempDir()
	path, pidFile := hangingPlugin(t, dir)
	done := make(chan error, 1)
	go func() {
		c := call(path, "ADD", "net1")
		_, err := (&Exec{Busy: idle}).ExecPlugin(context.Background(), path, []byte(`{}`), c.Env)
		done <- err
	}()
	pids := waitPids(t, pidFile)
	if left := KillAll(10 * time.Second); len(left) > 0 {
		t.Errorf("KillAll left groups %v", left)
	}
	if left := stillRunning(pids); len(left) > 0 {
		t.Errorf("still running after KillAll: %v", left)
	}
	if err := <-done; err == nil {
		t.Error("the killed plugin's call succeeded")
	}
}

// BenchmarkStart compares a delegate's start with spawn (its own process
// group, the parent death signal, the thread's slack put back for the fork)
// with a plain start, each followed by the wait for its exit.
func BenchmarkStart(b *testing.B) {
	run := func(b *testing.B, start func(*exec.Cmd) error) {
		for b.Loop() {
			cmd := exec.Command("/bin/true")
			if err := start(cmd); err != nil {
				b.Fatal(err)
			}
			cmd.Wait()
			groups.done(cmd.Process.Pid)
		}
	}
	b.Run("spawn", func(b *testing.B) { run(b, spawn) })
	b.Run("direct", func(b *testing.B) { run(b, (*exec.Cmd).Start) })
}
