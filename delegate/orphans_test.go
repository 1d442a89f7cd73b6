package delegate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/scratch"
)

// killedCall starts, as a delegate of a call on containerID, a process that
// leads a group of its own and starts a child that runs on (`sleep 600`), and
// notes the group as the call does before the delegate gets its config. It
// returns the delegate's command (not yet reaped) and the child's pid, and
// the group's note stays as a call killed then leaves it. The test's cleanup
// kills both.
func killedCall(t *testing.T, r *Runner, containerID string, env ...string) (*exec.Cmd, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("sleep 600 & echo $! > %[1]s.tmp; mv %[1]s.tmp %[1]s; wait", pidFile))
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "CNI_COMMAND=ADD", "CNI_CONTAINERID=" + containerID}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	var child int
	for deadline := time.Now().Add(30 * time.Second); child == 0; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the delegate never started its child")
		}
	}
	t.Cleanup(func() {
		if running(child) {
			syscall.Kill(child, syscall.SIGKILL)
		}
	})
	start, ok := procStart(cmd.Process.Pid)
	if !ok {
		t.Fatal("no start time")
	}
	l, err := r.Store.Lock(context.Background(), containerID)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Groups().Started(scratch.Group{Pgid: cmd.Process.Pid, Start: start, PidNS: pidNamespace()}); err != nil {
		t.Fatal(err)
	}
	// Killed: the lock goes with the process, the note stays.
	l.Unlock(false)
	return cmd, child
}

// TestDelEndsWhatAKilledCallLeft: manifold SIGKILLed mid-ADD (the runtime's
// timeout, the OOM killer) takes its delegate with it (the parent death
// signal), but not the delegate's child. The container's DEL kills it, from
// the note of the delegate's group, whether the node's init reaped the
// delegate or not; and never a process that is not that call's: one
// without the container's mark, or a group whose leader's start time is
// another (its pid reused).
func TestDelEndsWhatAKilledCallLeft(t *testing.T) {
	ctx := context.Background()
	t.Run("delegate reaped", func(t *testing.T) {
		r := newRunner(t, &fakeCNI{})
		cmd, child := killedCall(t, r, "c1")
		// A process of another call that joined the group (as if the
		// group's id were reused) has no mark of c1's: left alone.
		stranger := exec.Command("/bin/sleep", "600")
		stranger.Env = []string{"CNI_CONTAINERID=c1x"}
		stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: cmd.Process.Pid}
		if err := stranger.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stranger.Process.Kill(); stranger.Wait() }()
		cmd.Process.Kill()
		cmd.Wait()
		if !running(child) {
			t.Fatal("the child died with the delegate; the test shows nothing")
		}
		if err := r.Del(ctx, DelRequest{ContainerID: "c1"}); err != nil {
			t.Fatal(err)
		}
		if running(child) {
			t.Errorf("the child %d of a killed call's delegate still runs after the container's DEL", child)
		}
		if !running(stranger.Process.Pid) {
			t.Errorf("DEL killed %d, a process of the group without the container's mark", stranger.Process.Pid)
		}
		if _, err := os.Stat(r.Store.LockPath("c1")); !os.IsNotExist(err) {
			t.Errorf("the lock file, with the notes of the groups, is left after DEL: %v", err)
		}
	})
	t.Run("delegate a zombie", func(t *testing.T) {
		r := newRunner(t, &fakeCNI{})
		cmd, child := killedCall(t, r, "c2")
		cmd.Process.Kill() // not reaped: its group id stays its own
		if err := r.Del(ctx, DelRequest{ContainerID: "c2"}); err != nil {
			t.Fatal(err)
		}
		if running(child) {
			t.Errorf("the child %d of a killed call's delegate still runs after the container's DEL", child)
		}
	})
	t.Run("pid reused", func(t *testing.T) {
		r := newRunner(t, &fakeCNI{})
		cmd, child := killedCall(t, r, "c3")
		// The note names another process of the same pid: another start time.
		start, _ := procStart(cmd.Process.Pid)
		note := fmt.Sprintf("+ %d %d %d\n", cmd.Process.Pid, start-1, pidNamespace())
		if err := os.WriteFile(r.Store.LockPath("c3"), []byte(note), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.Del(ctx, DelRequest{ContainerID: "c3"}); err != nil {
			t.Fatal(err)
		}
		if !running(child) || !running(cmd.Process.Pid) {
			t.Errorf("DEL killed a group whose leader's start time is not the noted one")
		}
	})
	t.Run("GC", func(t *testing.T) {
		r := newRunner(t, &fakeCNI{})
		cmd, child := killedCall(t, r, "c4")
		cmd.Process.Kill()
		cmd.Wait()
		// No record: the call was killed before it saved one (a DEL's).
		if err := r.GC(ctx, GCRequest{}); err != nil {
			t.Fatal(err)
		}
		if running(child) {
			t.Errorf("the child %d of a killed call's delegate still runs after GC", child)
		}
	})
}

// TestDelRemovesItsTempRecord: a call killed while it saved the record
// leaves the temp file; the container's DEL removes it, and not that of a
// container whose ID starts with this one's. GC removes that one, once the
// runtime no longer lists it.
func TestDelRemovesItsTempRecord(t *testing.T) {
	r := newRunner(t, &fakeCNI{})
	ctx := context.Background()
	if _, err := r.Add(ctx, record("abc")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"abc", "abc-1"} {
		// What a Save killed between its write and its rename leaves.
		if err := os.WriteFile(r.Store.TempPath(id), []byte(`{"version":1,"summ`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Del(ctx, DelRequest{ContainerID: "abc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Store.TempPath("abc")); !os.IsNotExist(err) {
		t.Errorf("the container's temp record is left after its DEL: %v", err)
	}
	if _, err := os.Stat(r.Store.TempPath("abc-1")); err != nil {
		t.Errorf("DEL of abc removed abc-1's temp record: %v", err)
	}
	if err := r.GC(ctx, GCRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Store.TempPath("abc-1")); !os.IsNotExist(err) {
		t.Errorf("the temp record of a container the runtime does not list is left after GC: %v", err)
	}
}

// TestExecNotesGroupBeforeConfig: the delegate's group is noted before the
// delegate reads its config, and noted as ended once it exited.
func TestExecNotesGroupBeforeConfig(t *testing.T) {
	dir := t.TempDir()
	s := &scratch.Store{Dir: dir}
	plugin := filepath.Join(dir, "plugin")
	// It copies the notes as it finds them before it reads stdin.
	script := fmt.Sprintf("#!/bin/sh\ncat %s > %s/seen\ncat >/dev/null\necho '{\"cniVersion\":\"1.0.0\"}'\n", s.LockPath("c"), dir)
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := s.Lock(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	e := &Exec{}
	ctx := withGroupLog(context.Background(), l)
	if _, err := e.ExecPlugin(ctx, plugin, []byte(`{}`), []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c"}); err != nil {
		t.Fatal(err)
	}
	seen, _ := os.ReadFile(filepath.Join(dir, "seen"))
	if !strings.HasPrefix(string(seen), "+ ") {
		t.Errorf("the delegate found the notes %q before its config, want its group noted", seen)
	}
	if g, err := l.Groups().Leftovers(); err != nil || len(g) != 0 {
		t.Errorf("groups not ended after the delegate exited: %v, %v", g, err)
	}
	l.Unlock(false)
	if fi, err := os.Stat(s.LockPath("c")); err != nil || fi.Size() != 0 {
		t.Errorf("notes left after the call: %v, %v", fi, err)
	}
}

// BenchmarkKilledCallBookkeeping is a call on a container with three
// delegates and nothing left by a killed call: the lock, the look for notes
// in it and for a temp record, each delegate's start time and its two
// lines, and the notes emptied at the unlock. The lock and unlock alone are
// what a call paid before.
func BenchmarkKilledCallBookkeeping(b *testing.B) {
	r := &Runner{CNI: &fakeCNI{}, Store: &scratch.Store{Dir: b.TempDir()}}
	ctx := context.Background()
	self := os.Getpid()
	ns := pidNamespace()
	for b.Loop() {
		l, err := r.Store.Lock(ctx, "c")
		if err != nil {
			b.Fatal(err)
		}
		if err := r.endLeftovers(l, "c"); err != nil {
			b.Fatal(err)
		}
		r.Store.RemoveTemp("c")
		for pgid := 100; pgid < 103; pgid++ {
			start, _ := procStart(self)
			l.Groups().Started(scratch.Group{Pgid: pgid, Start: start, PidNS: ns})
			l.Groups().Ended(pgid)
		}
		l.Unlock(false)
	}
}
