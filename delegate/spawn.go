package delegate

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How a delegate process is started and ended, so that none outlives the call
// that started it (docs/reliability.md, "No process outlives its call"):
//
//   - Each delegate leads a process group of its own (Setpgid), so a kill
//     takes the processes it started too: an `iptables` waiting on the xtables
//     lock, a helper it forked. A kill at callTimeout, on cancellation, at the
//     daemon's shutdown, or of a process started early that never got its
//     turn, is a kill of the group.
//   - Each delegate gets SIGKILL from the kernel when manifold dies
//     (Pdeathsig), SIGKILLed included: thin mode under the runtime's
//     timeout, the daemon under the OOM killer. The kernel sends that signal
//     when the thread that forked exits, not the process (golang/go#27505).
//     The Go runtime ends a thread only when a goroutine locked to it returns
//     without unlocking it. Nothing that manifold links does that: the one
//     place that switches a thread's namespace (inNetNS) keeps a thread it
//     could not bring back for good rather than let it end, and
//     TestLinkedCodeEndsNoThread holds every LockOSThread in the binaries'
//     packages to that. So every thread lives as long as the process, and a
//     delegate is forked on the thread of the goroutine that starts it.
//
// What can still escape: once the delegate itself is gone because manifold
// died, its own children (which do not inherit Pdeathsig) are left to the
// node's init, since no process of manifold is left to kill their group.

// forkMu lets one goroutine at a time lock its thread and fork (spawn).
var forkMu sync.Mutex

// spawn starts cmd in a process group of its own, with SIGKILL as its parent
// death signal, on the calling goroutine's thread: handing each start to a
// thread kept for forks cost the daemon's one P a switch there and back
// (docs/performance-history.md, change 21).
func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// Locked for the fork alone: withChildSlack sets the slack of the thread
	// that forks, which must be the one it puts back. One fork at a time (Go
	// holds syscall.ForkLock through each anyway), and forkMu is taken before
	// the thread is locked: a locked goroutine that waits keeps its thread
	// waiting with it, and a storm of calls would make each waiting caller a
	// thread of its own.
	forkMu.Lock()
	runtime.LockOSThread()
	err := withChildSlack(cmd.Start)
	runtime.UnlockOSThread()
	forkMu.Unlock()
	if err == nil {
		groups.add(cmd.Process.Pid)
	}
	return err
}

// killGroup sends SIGKILL to the process group that pid leads. Call it before
// pid is reaped: until then its pid, and so the group's id, cannot be reused.
func killGroup(pid int) {
	if pid > 0 {
		unix.Kill(-pid, unix.SIGKILL)
	}
}

// groupWait bounds how long a killed group is waited for. SIGKILL ends a
// process at once; what takes time is the node's init reaping the children
// that the delegate left to it.
const groupWait = 2 * time.Second

// errGroupLeft is returned when processes of a killed delegate's group were
// still there at groupWait.
var errGroupLeft = errors.New("processes of the killed plugin's group were still running")

// awaitGroup returns once no process is left in the group pgid (kill(2) with
// signal 0 answers ESRCH), or at bound with errGroupLeft. The group's leader
// must have been reaped already, or it counts itself.
func awaitGroup(pgid int, bound time.Duration) error {
	defer groups.remove(pgid)
	delay := time.Millisecond
	for deadline := time.Now().Add(bound); ; {
		if !groupAlive(pgid) {
			return nil
		}
		if time.Now().After(deadline) {
			return errGroupLeft
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// groupAlive reports whether a process of the group pgid is still running.
// A zombie does not count: it has let go of everything it held (its locks,
// its files, its network namespace), and only waits for its parent, or for
// the node's init once orphaned, to reap it; an init that reaps late must not
// make a killed group look alive.
func groupAlive(pgid int) bool {
	if err := unix.Kill(-pgid, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// After the command's closing parenthesis: state, ppid, pgrp, …
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// groups are the process groups of the delegates this process started and
// has not yet seen end: what KillAll ends.
var groups = &groupSet{pgids: map[int]struct{}{}}

type groupSet struct {
	mu    sync.Mutex
	pgids map[int]struct{}
}

func (g *groupSet) add(pgid int) {
	g.mu.Lock()
	g.pgids[pgid] = struct{}{}
	g.mu.Unlock()
}

func (g *groupSet) remove(pgid int) {
	g.mu.Lock()
	delete(g.pgids, pgid)
	g.mu.Unlock()
}

// done forgets a group whose leader exited by itself: what the leader left
// running belongs to a plugin that answered, as when the runtime runs it.
func (g *groupSet) done(pgid int) { g.remove(pgid) }

func (g *groupSet) list() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, 0, len(g.pgids))
	for p := range g.pgids {
		out = append(out, p)
	}
	return out
}

// KillAll kills the process group of every delegate still running, and waits
// for them, at most bound in all. The node daemon calls it last at its
// shutdown, after the calls in flight were cancelled: a rollback's DEL still
// running then would otherwise outlive the daemon. It returns the groups
// that were still there at the bound.
func KillAll(bound time.Duration) []int {
	pgids := groups.list()
	for _, p := range pgids {
		killGroup(p)
	}
	deadline := time.Now().Add(bound)
	var left []int
	for _, p := range pgids {
		if awaitGroup(p, max(time.Until(deadline), 0)) != nil {
			left = append(left, p)
		}
	}
	return left
}
