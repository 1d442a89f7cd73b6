package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
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
// it, which the Go runtime ends with the goroutine (all but the main thread,
// which it parks). It returns once the kernel is done with every one of them (its /proc/self/task entry is gone,
// so a parent death signal it owed was sent), or an error after 30s.
func EndThreads(n int) error {
	tids := make([]int, n)
	for i := range n {
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			runtime.LockOSThread() // never unlocked
			tids[i] = syscall.Gettid()
		}()
		<-ended
		runtime.Gosched()
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, tid := range tids {
		if tid == os.Getpid() {
			continue // the main thread: the runtime parks it instead of ending it
		}
		for {
			if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("thread %d of a goroutine that ended locked to it still exists after 30s", tid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// AliveUnsignalled reports whether process pid runs, is not a zombie, and
// has no SIGKILL pending: what a process that a parent death signal missed
// looks like, even right after the signal would have been sent.
func AliveUnsignalled(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	const sigkill = 1 << (syscall.SIGKILL - 1)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return false
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err != nil || mask&sigkill != 0 {
				return false
			}
		}
	}
	return true
}
