package delegate

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The timer slack of manifold's own threads (docs/performance-history.md,
// change 19).
//
// The Go runtime's monitor thread, sysmon, sleeps 20 µs at a time, hundreds
// of times in a row, whenever a goroutine of the process runs or sits in a
// system call: through a delegate's start (the fork's vfork wait holds a P),
// the record's fsyncs, the API calls. Each of those sleeps ends in a wake-up
// of the thread, and on a node's 2 virtual CPUs these were the largest
// single share of the daemon's CPU once the reap was off its path (change
// 18). The kernel lets a thread's sleeps run late by its timer slack (50 µs
// by default): raised to TimerSlack for every thread of manifold, sysmon's 20
// µs sleeps last about a millisecond, and it wakes some 50 times less often.
// Nothing in manifold waits on a timer finer than that; a wait on a pipe, a
// socket or a process's exit ends when the event comes, whatever the slack.
//
// The delegates are not manifold's: a process inherits the slack of the
// thread that forked it, so spawn puts the process's old slack back on the
// forking thread for the time of each fork, and each plugin runs with the
// slack it would have had if the runtime had called it.

// TimerSlack is the timer slack that RaiseTimerSlack gives manifold's
// threads.
const TimerSlack = 1_000_000 // ns

// childSlack is the slack, in ns, that spawn gives the delegates: the one
// the process had before RaiseTimerSlack; 0 while it has not run. ownSlack is
// the process's own, RaiseTimerSlack's ns.
var childSlack, ownSlack atomic.Int64

// RaiseTimerSlack sets the timer slack of every thread of the process to ns,
// and keeps the slack the calling thread had before for the delegates
// (spawn). Threads started later inherit it from the thread that
// starts them. The daemon calls it early in its start; the thin binary does
// not, since it measured no gain there for the work it adds to every call's
// start. Setting another thread's slack needs CAP_SYS_NICE; without it, the
// threads not yet done keep theirs and the error says why: the process is
// as fast as before, only not cheaper. A kernel without
// /proc/<tid>/timerslack_ns (before 4.6) leaves the other threads as they
// were, with no error.
func RaiseTimerSlack(ns int) error {
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("timer slack: prctl(PR_GET_TIMERSLACK): %w", err)
	}
	// Before any thread changes: a fork on a thread already raised must
	// still put the old slack back.
	childSlack.Store(int64(old))
	ownSlack.Store(int64(ns))
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: prctl(PR_SET_TIMERSLACK): %w", err)
	}
	done := map[string]bool{strconv.Itoa(unix.Gettid()): true}
	// The runtime may start a thread while the list is read: read it
	// again until it holds no thread not yet done.
	for changed := true; changed; {
		changed = false
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("timer slack: %w", err)
		}
		for _, t := range tids {
			if done[t.Name()] {
				continue
			}
			// The per-thread file is at /proc/<tid>, not under task/.
			err := os.WriteFile("/proc/"+t.Name()+"/timerslack_ns", []byte(strconv.Itoa(ns)), 0)
			// A thread gone meanwhile: ENOENT before the open, ESRCH
			// after it (the file was opened, the thread then exited).
			if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("timer slack of thread %s: %w", t.Name(), err)
			}
			done[t.Name()], changed = true, true
		}
	}
	return nil
}

// withChildSlack runs fork, on a thread locked to the caller, with the slack
// that the delegates it forks must inherit, and gives the thread manifold's
// own back after it.
func withChildSlack(fork func() error) error {
	child, own := childSlack.Load(), ownSlack.Load()
	if child <= 0 {
		return fork()
	}
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(child), 0, 0, 0)
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(own), 0, 0, 0)
	return fork()
}
