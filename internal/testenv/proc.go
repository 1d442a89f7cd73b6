package testenv

import (
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// StatFields splits the text of /proc/<pid>/stat (or of a thread's
// /proc/<pid>/task/<tid>/stat) after the command name: [0] is the state
// (field 3 in proc(5)), [11] and [12] utime and stime (fields 14 and 15). The
// name, in parentheses, may hold spaces and parentheses itself, so the fields
// start after the last ')'. It is nil when the text has no ')'.
func StatFields(stat string) []string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(stat[i+1:])
}

// StartTied starts cmd so that it dies with this process, even one that is
// SIGKILLed: with SIGKILL as its parent death signal, forked and waited for on
// a goroutine locked to its thread, since the kernel sends that signal when
// the forking thread ends, not the process (golang/go#27505). The channel is
// closed once cmd.Wait has returned; if waitErr is not nil, Wait's error is
// stored there first.
func StartTied(cmd *exec.Cmd, waitErr *error) (chan struct{}, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		if waitErr != nil {
			*waitErr = err
		}
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// EndThreads ends n OS threads of this process, one after the other: each
// is the thread of a goroutine that locks it and returns without unlocking
// it, which the Go runtime ends with the goroutine. A process whose parent
// death signal came from one of them is then gone.
func EndThreads(n int) {
	for range n {
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			runtime.LockOSThread() // never unlocked
		}()
		<-ended
		runtime.Gosched()
	}
}
