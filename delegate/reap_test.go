package delegate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The exit read without reaping (ReapLater) says what exec.Cmd.Wait says:
// success as nil, and the same text for an exit code or a signal, which a
// plugin's error message quotes when the plugin printed nothing.
func TestExitStatusReadsAsWait(t *testing.T) {
	for _, script := range []string{"exit 0", "exit 3", "kill -KILL $$", "kill -TERM $$"} {
		cmd := exec.Command("/bin/sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pidfd := openPidfd(cmd.Process.Pid)
		if pidfd < 0 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("no pidfd for the process")
		}
		info, ok := awaitExit(pidfd)
		got := exitStatus(info)
		want := cmd.Wait()
		if !ok {
			t.Errorf("%s: awaitExit read no exit", script)
			continue
		}
		switch {
		case want == nil && got != nil:
			t.Errorf("%s: exitStatus = %v, want nil as Wait", script, got)
		case want != nil && (got == nil || got.Error() != want.Error()):
			t.Errorf("%s: exitStatus = %v, want %q as Wait", script, got, want)
		}
	}
}

// With ReapLater, a plugin's call gets its output and its failure as
// without, and the plugin's process is reaped afterwards all the same.
func TestReapLaterAnswersThenReaps(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	ok := scriptPlugin(t, dir, "ok", "echo $$ >> "+pids, "")
	noisy := filepath.Join(dir, "noisy")
	if err := os.WriteFile(noisy, []byte("#!/bin/sh\necho $$ >> "+pids+"\necho 'no bridge here' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	silent := filepath.Join(dir, "silent")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\necho $$ >> "+pids+"\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Exec{ReapLater: true}
	run(t, e, call(ok, "ADD", "eth0"), "config")
	for _, c := range []struct{ path, want string }{
		{noisy, "no bridge here"},
		{silent, "failed with no message: exit status 4"},
	} {
		_, err := e.ExecPlugin(context.Background(), c.path, []byte("config"), call(c.path, "ADD", "eth0").Env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ExecPlugin %s = %v, want an error with %q", filepath.Base(c.path), err, c.want)
		}
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			// A reaped child is gone from /proc: ESRCH. A zombie still answers.
			if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("plugin process %d was not reaped within 10s of its call", pid)
			}
		}
	}
	// Without KeepPending (the daemon), the timers reap them, and the Exec
	// keeps nothing for ReapPending.
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pending) != 0 {
		t.Errorf("the Exec keeps %d reapers without KeepPending, want none", len(e.pending))
	}
}

// ReapPending, the binary's last step, reaps at once every process that
// ReapLater left to its timer: after it, none of the call's plugins is left
// a zombie of this process. The timer is set far off, so that only
// ReapPending can have reaped them.
func TestReapPendingLeavesNoZombie(t *testing.T) {
	saved := reapDelay
	reapDelay = time.Hour
	t.Cleanup(func() {
		flushLateReaps()
		reapDelay = saved
	})
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	ok := scriptPlugin(t, dir, "ok", "echo $$ >> "+pids, "")
	failing := filepath.Join(dir, "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho $$ >> "+pids+"\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Exec{ReapLater: true, KeepPending: true, Busy: idle}
	e.Expect([]Call{call(ok, "ADD", "eth0"), call(ok, "ADD", "net1")})
	run(t, e, call(ok, "ADD", "eth0"), "config")
	run(t, e, call(ok, "ADD", "net1"), "config")
	if _, err := e.ExecPlugin(context.Background(), failing, []byte("config"), call(failing, "ADD", "net2").Env); err == nil {
		t.Fatal("ExecPlugin failing: no error")
	}
	e.Close()
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 3 {
		t.Fatalf("%d plugins ran, want 3: %q", len(fields), fields)
	}
	zombie := func(pid int) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err == nil && info.Signo != 0
	}
	for _, f := range fields {
		if pid, _ := strconv.Atoi(f); !zombie(pid) {
			t.Fatalf("plugin process %d was reaped before ReapPending; the test cannot tell", pid)
		}
	}
	e.ReapPending()
	for _, f := range fields {
		pid, _ := strconv.Atoi(f)
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.ECHILD) {
			t.Errorf("plugin process %d after ReapPending: waitid = %v (signo %d), want ECHILD: not reaped", pid, err, info.Signo)
		}
	}
	e.ReapPending() // nothing left: a no-op
}

// The reaps that ReapLater puts off go together: plugins that exit some ms
// apart, as a pod's delegates do, are reaped by one run of the queue's timer,
// each at least reapDelay after its exit, and the queue is left empty, its
// timer gone. One timer for each plugin would have reaped them one by one.
func TestLateReapsGoTogether(t *testing.T) {
	flushLateReaps() // what earlier tests queued
	savedDelay, savedBatch := reapDelay, reapBatch
	// A batch long enough for the three calls below on a loaded machine.
	reapDelay, reapBatch = 100*time.Millisecond, 2*time.Second
	type ran struct {
		reaped   int
		youngest time.Duration
	}
	runs := make(chan ran, 10)
	setReapRan(func(reaped int, youngest time.Duration) { runs <- ran{reaped, youngest} })
	t.Cleanup(func() {
		setReapRan(nil)
		flushLateReaps()
		reapDelay, reapBatch = savedDelay, savedBatch
	})
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	ok := scriptPlugin(t, dir, "ok", "echo $$ >> "+pids, "")
	e := &Exec{ReapLater: true, Busy: idle}
	for _, ifname := range []string{"eth0", "net1", "net2"} {
		run(t, e, call(ok, "ADD", ifname), "config")
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(b))); n != 3 {
		t.Fatalf("%d plugins ran, want 3", n)
	}
	select {
	case r := <-runs:
		if r.reaped != 3 {
			t.Errorf("the first run of the reap timer reaped %d plugins, want all 3", r.reaped)
		}
		if r.youngest < reapDelay {
			t.Errorf("a plugin was reaped %s after its exit, want %s at least", r.youngest, reapDelay)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reap timer did not run within 20s")
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); !errors.Is(err, unix.ECHILD) {
			t.Errorf("plugin process %d after the reap timer ran: waitid = %v (signo %d), want ECHILD: not reaped", pid, err, info.Signo)
		}
	}
	lateReaps.Lock()
	left, timer := len(lateReaps.queue), lateReaps.timer
	lateReaps.Unlock()
	if left != 0 || timer != nil {
		t.Errorf("after the run, %d reaps queued and a timer of %v, want none", left, timer)
	}
}

func setReapRan(f func(reaped int, youngest time.Duration)) {
	lateReaps.Lock()
	reapRan = f
	lateReaps.Unlock()
}

// flushLateReaps reaps every queued plugin now and stops the queue's timer,
// so that a test that set the delays leaves none for the next.
func flushLateReaps() {
	lateReaps.Lock()
	q := lateReaps.queue
	lateReaps.queue = nil
	if lateReaps.timer != nil {
		lateReaps.timer.Stop()
		lateReaps.timer = nil
	}
	lateReaps.Unlock()
	for _, l := range q {
		l.r.reap()
	}
}
