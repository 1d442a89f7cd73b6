package delegate

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// threadSlacks reads the timer slack of every thread of this process.
func threadSlacks(t *testing.T) map[string]int {
	t.Helper()
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/" + tid.Name() + "/timerslack_ns")
		if os.IsNotExist(err) {
			continue // gone meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		out[tid.Name()] = n
	}
	return out
}

// raiseForTest raises the slack of the test process, and puts every thread's
// slack back, and childSlack, when the test ends.
func raiseForTest(t *testing.T, ns int) (old int) {
	t.Helper()
	testenv.RequirePrivileged(t) // CAP_SYS_NICE, for the other threads
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RaiseTimerSlack(old); err != nil {
			t.Errorf("put the slack back: %v", err)
		}
		childSlack.Store(0)
		ownSlack.Store(0)
	})
	if err := RaiseTimerSlack(ns); err != nil {
		t.Fatal(err)
	}
	return old
}

// TestRaiseTimerSlackReachesEveryThread: every thread the process has, not
// only the caller's (sysmon is another), gets the slack, and a thread
// started after it inherits it.
func TestRaiseTimerSlackReachesEveryThread(t *testing.T) {
	// Threads of their own, parked, so that the process has several.
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	park := func(n int) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			ready := make(chan struct{})
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				close(ready)
				<-release
				// Locked and returning: the runtime ends the thread.
			}()
			<-ready
		}
	}
	park(4)
	const want = 777_000
	raiseForTest(t, want)
	park(2) // started after the raise
	slacks := threadSlacks(t)
	if len(slacks) < 7 {
		t.Fatalf("only %d threads: %v", len(slacks), slacks)
	}
	for tid, s := range slacks {
		if s != want {
			t.Errorf("thread %s has a timer slack of %d ns, want %d (all: %v)", tid, s, want, slacks)
		}
	}
}

// TestDelegatesKeepTheirSlack: a process that spawn forks has the
// slack the process had before RaiseTimerSlack, not manifold's.
func TestDelegatesKeepTheirSlack(t *testing.T) {
	old := raiseForTest(t, 888_000)
	for i := 0; i < 3; i++ { // on threads made before the raise or after
		cmd := exec.Command("cat", "/proc/self/timerslack_ns")
		var out strings.Builder
		cmd.Stdout = &out
		if err := spawn(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		groups.done(cmd.Process.Pid)
		if got := strings.TrimSpace(out.String()); got != strconv.Itoa(old) {
			t.Errorf("the delegate's timer slack is %s ns, want the process's own %d", got, old)
		}
	}
}
