package delegate

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// setNetNS moves the calling thread into a network namespace; a variable so
// that a test can make the move back fail.
var setNetNS = netns.Set

// errThreadKept says that a thread could not go back to its own network
// namespace and is kept out of use for the life of the process.
var errThreadKept = errors.New("the thread could not go back to its own network namespace; it is kept out of use")

// inNetNS runs fn on a goroutine of its own, locked to its thread, with that
// thread in the network namespace at path, and returns fn's error.
//
// Afterwards the thread goes back to its own namespace. If it cannot, it must
// not run any other goroutine, and it must not end either: the kernel sends
// the parent death signal of every delegate forked on a thread when that
// thread ends (spawn), and the Go runtime ends the thread of a goroutine that
// returns locked, which is what netns helpers usually do here. So the
// goroutine then blocks for good, its thread locked to it, and the call gets
// errThreadKept beside fn's error. The kept thread may still be in the pod's
// namespace, which the kernel then keeps until the process ends; a setns back
// to the namespace a thread came from does not fail in practice.
func inNetNS(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := netns.Get()
		if err != nil {
			target.Close()
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open the thread's own network namespace: %w", err)
			return
		}
		if err := setNetNS(target); err != nil {
			target.Close()
			own.Close()
			runtime.UnlockOSThread() // setns changed nothing
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		ferr := fn()
		err = setNetNS(own)
		target.Close()
		own.Close()
		if err != nil {
			done <- errors.Join(ferr, fmt.Errorf("%w: %v", errThreadKept, err))
			select {} // locked, and never returns
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}
