package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// procWatch follows the lifetimes of the benchmark's descendant processes
// through the kernel's process events connector (NETLINK_CONNECTOR,
// CN_IDX_PROC). The kernel stamps each fork, exec and exit with its monotonic
// clock, so the time manifold's delegates ran is known exactly, with nothing
// wrapped around them and no cost added to the processes measured.
type procWatch struct {
	fd int

	mu        sync.Mutex
	changed   *sync.Cond
	root      uint32
	procs     map[uint32]*procLife
	overruns  int
	readerErr error
}

// procLife is one process: kernel timestamps in nanoseconds, 0 when not seen.
type procLife struct {
	pid, parent      uint32
	fork, exec, exit uint64
	children         []uint32
}

// Process events connector ABI (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventFork     = 0x00000001
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000
	nlmsgHdrLen       = 16
	cnMsgLen          = 20
)

func startProcWatch() (*procWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open process events connector: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind process events connector: %w", err)
	}
	// Every process on the machine is reported; a deep buffer keeps a burst
	// elsewhere (a compile) from overrunning it.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 64<<20)
	}
	msg := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.NLMSG_DONE)
	ne.PutUint32(msg[12:], uint32(os.Getpid()))
	ne.PutUint32(msg[16:], cnIdxProc)
	ne.PutUint32(msg[20:], cnValProc)
	ne.PutUint16(msg[32:], 4)
	ne.PutUint32(msg[36:], procCnMcastListen)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribe to process events: %w", err)
	}
	w := &procWatch{fd: fd, root: uint32(os.Getpid()), procs: map[uint32]*procLife{}}
	w.changed = sync.NewCond(&w.mu)
	go w.read()
	return w, nil
}

func (w *procWatch) close() { _ = unix.Close(w.fd) }

func (w *procWatch) read() {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(w.fd, buf, 0)
		if errors.Is(err, unix.ENOBUFS) {
			w.mu.Lock()
			w.overruns++
			w.mu.Unlock()
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			w.mu.Lock()
			w.readerErr = err
			w.changed.Broadcast()
			w.mu.Unlock()
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		w.mu.Lock()
		for _, m := range msgs {
			w.event(m.Data)
		}
		w.mu.Unlock()
	}
}

// event applies one proc_event. A new process is tracked when its parent is
// the benchmark or a tracked process; threads are ignored.
func (w *procWatch) event(d []byte) {
	if len(d) < cnMsgLen+16 {
		return
	}
	ne := binary.NativeEndian
	ev := d[cnMsgLen:]
	what, ts, data := ne.Uint32(ev[0:]), ne.Uint64(ev[8:]), ev[16:]
	switch what {
	case procEventFork:
		if len(data) < 16 {
			return
		}
		parentTgid, childPid, childTgid := ne.Uint32(data[4:]), ne.Uint32(data[8:]), ne.Uint32(data[12:])
		if childPid != childTgid {
			return
		}
		parent, ok := w.procs[parentTgid]
		if !ok && parentTgid != w.root {
			return
		}
		w.procs[childPid] = &procLife{pid: childPid, parent: parentTgid, fork: ts}
		if ok {
			parent.children = append(parent.children, childPid)
		}
	case procEventExec:
		if len(data) < 8 {
			return
		}
		if p, ok := w.procs[ne.Uint32(data[0:])]; ok {
			p.exec = ts
		}
	case procEventExit:
		if len(data) < 8 {
			return
		}
		pid, tgid := ne.Uint32(data[0:]), ne.Uint32(data[4:])
		if p, ok := w.procs[pid]; ok && pid == tgid {
			p.exit = ts
			w.changed.Broadcast()
		}
	}
}

// procTimes is manifold's process as the kernel saw it.
type procTimes struct {
	Wall time.Duration // fork to exit
	// Delegates is the time during which at least one of the processes it
	// started existed (fork to exit); Count is how many it started.
	Delegates time.Duration
	Count     int
	// Before is fork to the first child's fork, Between the gaps when no
	// child existed, After the last child's exit to exit.
	Before, Between, After time.Duration
}

// take waits until pid and its children have exited, returns their times and
// forgets them.
func (w *procWatch) take(pid int, timeout time.Duration) (procTimes, error) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		w.changed.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		p, ok := w.procs[uint32(pid)]
		if ok && p.exit != 0 && w.childrenDone(p) {
			t := w.times(p)
			w.forget(p)
			return t, nil
		}
		if w.readerErr != nil {
			return procTimes{}, fmt.Errorf("process events: %w", w.readerErr)
		}
		if time.Now().After(deadline) {
			delete(w.procs, uint32(pid))
			return procTimes{}, fmt.Errorf("process events of pid %d incomplete after %s (%d overruns so far)", pid, timeout, w.overruns)
		}
		w.changed.Wait()
	}
}

func (w *procWatch) childrenDone(p *procLife) bool {
	for _, c := range p.children {
		if cp, ok := w.procs[c]; ok && cp.exit == 0 {
			return false
		}
	}
	return true
}

func (w *procWatch) times(p *procLife) procTimes {
	t := procTimes{Wall: time.Duration(p.exit - p.fork)}
	var lives [][2]uint64
	for _, c := range p.children {
		if cp, ok := w.procs[c]; ok {
			lives = append(lives, [2]uint64{cp.fork, cp.exit})
		}
	}
	t.Count = len(lives)
	if t.Count == 0 {
		t.Before = t.Wall
		return t
	}
	// manifold starts a delegate's process before its turn (docs/performance.md),
	// so lifetimes overlap: count the time when at least one delegate process
	// existed, once.
	sort.Slice(lives, func(i, j int) bool { return lives[i][0] < lives[j][0] })
	t.Before = time.Duration(lives[0][0] - p.fork)
	start, end := lives[0][0], lives[0][1]
	for _, l := range lives[1:] {
		if l[0] > end {
			t.Delegates += time.Duration(end - start)
			t.Between += time.Duration(l[0] - end)
			start = l[0]
		}
		end = max(end, l[1])
	}
	t.Delegates += time.Duration(end - start)
	t.After = time.Duration(p.exit - end)
	return t
}

func (w *procWatch) forget(p *procLife) {
	for _, c := range p.children {
		if cp, ok := w.procs[c]; ok {
			w.forget(cp)
		}
	}
	delete(w.procs, p.pid)
}

// pruneRoot forgets finished direct children of the benchmark (the reference
// arm's delegates), which nobody takes.
func (w *procWatch) pruneRoot() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.procs {
		if p.parent == w.root && p.exit != 0 {
			w.forget(p)
		}
	}
}
