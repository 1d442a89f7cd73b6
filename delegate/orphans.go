package delegate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/scratch"
)

// What a killed call left running, and how the next call on the container
// ends it (docs/reliability.md, "No process outlives its call"). A call
// notes each delegate's process group in the container's lock file
// (scratch.GroupLog) before the delegate gets its config, or as soon as it
// starts when it starts early; when manifold is SIGKILLed, the kernel kills
// the delegate (its parent death signal) but not the processes it started,
// which live on in its group. The next call on the container, holding the
// container's lock, reads the groups that never ended and kills what is
// left of each, as long as it can tell the processes are that call's:
//
//   - The group's leader (the delegate) is still there, a zombie that the
//     node's init has not reaped or a process that survived: its pid and
//     start time are the noted ones, so the group is that call's, and the
//     whole group is killed.
//   - The leader is gone (init reaped it) and the group has processes: a
//     pid is not reused while a process group of its id has processes, so
//     this is the same group, unless every process of it ended, the pid
//     went to a new process that led a group of its own, and that leader
//     ended too (a daemon that forks and exits, say). Each process of the
//     group that started after the delegate and carries the container's
//     CNI_CONTAINERID in its environment (which a delegate's children
//     inherit) is killed, through a pidfd opened before its start time is
//     checked again, so that the signal cannot reach a process that took
//     its pid meanwhile. A process of the group without that mark is left
//     alone, and named in a warning.
//   - A leader with another start time: the pid went to another process,
//     so the noted group has no process left. Nothing is done.

// groupLogKey is the context key of the call's scratch.GroupLog.
type groupLogKey struct{}

// withGroupLog returns ctx with the GroupLog where the delegates run under
// it note their process groups: that of the container's lock.
func withGroupLog(ctx context.Context, l *scratch.Lock) context.Context {
	return context.WithValue(ctx, groupLogKey{}, l.Groups())
}

// noteIn makes l's GroupLog where the delegates of the call that took l
// note their groups: those run with the returned context, and the processes
// that Prestart starts early.
func (r *Runner) noteIn(ctx context.Context, l *scratch.Lock) context.Context {
	r.Prestart.noteGroupsIn(l.Groups())
	return withGroupLog(ctx, l)
}

func groupLogFrom(ctx context.Context) *scratch.GroupLog {
	g, _ := ctx.Value(groupLogKey{}).(*scratch.GroupLog)
	return g
}

// endLeftovers kills the processes of the groups that a killed call on
// containerID noted and never saw end, and waits for them to be gone; the
// notes are emptied when this call lets go of the lock. It keeps the notes,
// and returns an error, when some are still running after groupWait.
// Holding the container's lock.
func (r *Runner) endLeftovers(l *scratch.Lock, containerID string) error {
	open, err := l.Groups().Leftovers()
	if err != nil {
		l.Groups().Keep()
		return err
	}
	var errs []error
	killed := 0
	for _, g := range open {
		n, err := r.endGroup(g, containerID)
		killed += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		l.Groups().Keep()
		return errors.Join(errs...)
	}
	if killed > 0 {
		r.Log.Info("killed the processes that a killed call on this container left running", "processes", killed)
	}
	return nil
}

// endGroup ends what is left of the group g (see the top of this file) and
// returns how many processes it killed; an error when some are still
// running after groupWait.
func (r *Runner) endGroup(g scratch.Group, containerID string) (int, error) {
	if ns := pidNamespace(); ns == 0 || g.PidNS != ns {
		// Another pid namespace's pids name other processes here.
		r.Log.Warn("a killed call's delegate ran in another pid namespace; what it started cannot be named from here and is left alone", "pgid", g.Pgid, "pidNamespace", g.PidNS)
		return 0, nil
	}
	if errors.Is(unix.Kill(-g.Pgid, 0), unix.ESRCH) {
		return 0, nil
	}
	if start, ok := procStart(g.Pgid); ok {
		if start != g.Start {
			return 0, nil
		}
		n := len(groupMembers(g.Pgid))
		killGroup(g.Pgid)
		if err := waitGone(func() bool { return groupAlive(g.Pgid) }); err != nil {
			return 0, fmt.Errorf("end the processes that a killed call on container %s left running: %w %s after SIGKILL (process group %d)", containerID, err, groupWait, g.Pgid)
		}
		return n, nil
	}
	mark := []byte("CNI_CONTAINERID=" + containerID + "\x00")
	var pidfds []int
	var strangers []int
	for _, m := range groupMembers(g.Pgid) {
		if m.start < g.Start {
			strangers = append(strangers, m.pid)
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(m.pid) + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, mark...)) {
			strangers = append(strangers, m.pid)
			continue
		}
		fd, err := unix.PidfdOpen(m.pid, 0)
		if err != nil {
			continue // gone meanwhile
		}
		if start, ok := procStart(m.pid); !ok || start != m.start {
			unix.Close(fd)
			continue
		}
		if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
			unix.Close(fd)
			continue
		}
		pidfds = append(pidfds, fd)
	}
	if len(strangers) > 0 {
		r.Log.Warn("processes of a killed call's process group, whose leader is gone, do not carry this container's mark: left alone", "pgid", g.Pgid, "pids", fmt.Sprint(strangers))
	}
	defer func() {
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}()
	if err := waitGone(func() bool { return anyRunning(pidfds) }); err != nil {
		return 0, fmt.Errorf("end the processes that a killed call on container %s left running: %w %s after SIGKILL (process group %d)", containerID, err, groupWait, g.Pgid)
	}
	return len(pidfds), nil
}

// waitGone waits until running answers false, at most groupWait.
func waitGone(running func() bool) error {
	delay := time.Millisecond
	for deadline := time.Now().Add(groupWait); running(); {
		if time.Now().After(deadline) {
			return errGroupLeft
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
	return nil
}

// anyRunning reports whether a process of the pidfds has not exited yet; a
// pidfd polls readable once its process has exited (a zombie has).
func anyRunning(pidfds []int) bool {
	for _, fd := range pidfds {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil && n == 0 {
			return true
		}
	}
	return false
}

type member struct {
	pid   int
	start uint64
}

// groupMembers lists the processes of the group pgid that are not zombies,
// with their start times.
func groupMembers(pgid int) []member {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pgid)
	var out []member
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := statFields(pid)
		// After the command: state (3), ppid, pgrp (5), …, starttime (22).
		if !ok || len(f) < 20 || f[2] != want || f[0] == "Z" || f[0] == "X" {
			continue
		}
		start, err := strconv.ParseUint(f[19], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, member{pid: pid, start: start})
	}
	return out
}

// statFields are the fields of /proc/<pid>/stat after the command's closing
// parenthesis: field 3 (the state) first. Read with three system calls, as
// every delegate's start pays it: os.ReadFile adds an fstat and the
// netpoller's fcntl calls (docs/performance-history.md, change 23).
func statFields(pid int) ([]string, bool) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	// 52 numbers and a command of at most 15 bytes: well under a page,
	// which procfs gives in one read.
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return nil, false
	}
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// procStart is the start time of pid (field 22 of /proc/<pid>/stat, in
// clock ticks since boot), a zombie's too.
func procStart(pid int) (uint64, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}

// pidNamespace is the inode of this process's pid namespace, or 0 when it
// cannot be read.
var pidNamespace = sync.OnceValue(func() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
})

// note notes p's group in log, the GroupLog of the call that holds the
// container's lock, if there is one: when p starts early, as soon as it
// starts (a plugin could act before it reads its config), and otherwise
// before p gets its config. A process that started early before the call
// took the lock (the default network's, while the API is read) is noted
// when the lock is taken (noteGroupsIn). A delegate whose start time could
// not be read is not noted: its group could not be told from another that
// took its id.
func (p *proc) note(log *scratch.GroupLog) {
	if log == nil || p.startTime == 0 || pidNamespace() == 0 {
		return
	}
	if log.Started(scratch.Group{Pgid: p.cmd.Process.Pid, Start: p.startTime, PidNS: pidNamespace()}) == nil {
		p.groupLog = log
	}
}

// noteEnded notes that p's group ended (exited by itself, or killed and
// waited for).
func (p *proc) noteEnded() {
	if p.groupLog != nil {
		p.groupLog.Ended(p.cmd.Process.Pid)
	}
}

// noteGroupsIn makes log, that of the call that now holds the container's
// lock, where e's processes started early note their groups, and notes
// there the one that waits already. Nil-safe.
func (e *Exec) noteGroupsIn(log *scratch.GroupLog) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.notes = log
	waiting := e.next
	e.mu.Unlock()
	if waiting != nil {
		<-waiting.started
		if waiting.err == nil && waiting.groupLog == nil {
			waiting.note(log)
		}
	}
}
