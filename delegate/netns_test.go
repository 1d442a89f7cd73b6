package delegate

import (
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// sleeper is a `sleep 60` started with spawn, and what its exit gave.
type sleeper struct {
	cmd    *exec.Cmd
	exited chan error
}

func startSleeper() (*sleeper, error) {
	s := &sleeper{cmd: exec.Command("sleep", "60"), exited: make(chan error, 1)}
	if err := spawn(s.cmd); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	return s, nil
}

func (s *sleeper) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("sleep %d still there 10s after SIGKILL", s.cmd.Process.Pid)
	}
	groups.done(s.cmd.Process.Pid)
}

// TestThreadEndKillsItsDelegates is the hazard that spawn's forks on any
// thread rest on avoiding: a goroutine that returns locked to its thread ends
// that thread, and the kernel then sends the parent death signal (SIGKILL) of
// every delegate forked on it, though manifold lives on.
func TestThreadEndKillsItsDelegates(t *testing.T) {
	var s *sleeper
	var err error
	for s == nil && err == nil {
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			runtime.LockOSThread() // never unlocked: the runtime ends the thread
			if syscall.Gettid() != syscall.Getpid() {
				s, err = startSleeper()
			} // else the main thread, which the runtime parks instead: again
		}()
		<-ended
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop(t)
	select {
	case err := <-s.exited:
		s.exited <- err
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("sleep ended with %v, want SIGKILL", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sleep still running 30s after the thread that forked it ended")
	}
}

// TestInNetNSKeepsAThreadItCannotRestore: when the thread cannot go back to
// its own network namespace, inNetNS says so and keeps the thread, so a
// delegate forked on it lives on (netns helpers that let such a thread end
// would have it killed, as above).
func TestInNetNSKeepsAThreadItCannotRestore(t *testing.T) {
	testenv.RequirePrivileged(t)
	real := setNetNS
	defer func() { setNetNS = real }()
	moves := 0
	setNetNS = func(h netns.NsHandle) error {
		moves++
		if err := real(h); err != nil {
			return err
		}
		if moves == 2 {
			// The move back happened; say it did not.
			return errors.New("injected failure")
		}
		return nil
	}
	keptBefore := keptGoroutines()
	var s *sleeper
	var err error
	// Not on the main thread, which the runtime never ends (each try keeps
	// a thread).
	for try := 0; s == nil && try < 10; try++ {
		moves = 0
		err = inNetNS("/proc/self/ns/net", func() error {
			if syscall.Gettid() == syscall.Getpid() {
				return nil
			}
			var err error
			s, err = startSleeper()
			return err
		})
	}
	if s != nil {
		defer s.stop(t)
	}
	if !errors.Is(err, errThreadKept) || s == nil {
		t.Fatalf("inNetNS = %v (sleep started: %v), want errThreadKept", err, s != nil)
	}
	// inNetNS answers before its goroutine is done. Wait until that goroutine
	// is blocked for good (a goroutine that returned locked would have taken
	// the delegate with its thread by then, at once: the test above).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-s.exited:
			s.exited <- err
			t.Fatalf("the delegate forked on the kept thread ended: %v", err)
		default:
		}
		if keptGoroutines() > keptBefore {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no goroutine of inNetNS blocked for good 10s after it answered")
		}
	}
	if !testenv.AliveUnsignalled(s.cmd.Process.Pid) {
		t.Fatal("the delegate forked on the kept thread is dying")
	}
}

// keptGoroutines counts the goroutines of inNetNS blocked in their select
// with no cases.
func keptGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "[select (no cases)") && strings.Contains(g, "delegate.inNetNS") {
			n++
		}
	}
	return n
}

// TestInNetNS: fn runs in the namespace at path, on a thread that is back in
// its own afterwards, and fn's error comes back.
func TestInNetNS(t *testing.T) {
	testenv.RequirePrivileged(t)
	target := testenv.NetNS(t).Path()
	want, err := netns.GetFromPath(target)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	fnErr := errors.New("from fn")
	err = inNetNS(target, func() error {
		got, err := netns.Get()
		if err != nil {
			return err
		}
		defer got.Close()
		if !got.Equal(want) {
			t.Errorf("fn ran in %s, want the namespace at %s", got, target)
		}
		return fnErr
	})
	if !errors.Is(err, fnErr) {
		t.Errorf("inNetNS = %v, want fn's error", err)
	}
	if err := inNetNS(t.TempDir(), func() error { t.Error("fn ran for a path that is no namespace"); return nil }); err == nil {
		t.Error("inNetNS of a directory gave no error")
	}
}
