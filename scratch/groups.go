package scratch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The process groups of a container's delegates, noted in the container's
// lock file (cniDir/locks/<containerID>).
//
// Each delegate leads a process group of its own. A call that is SIGKILLed
// (thin manifold at the runtime's timeout, the daemon under the OOM killer)
// takes its running delegate with it (the parent death signal), but not
// what that delegate started: no process of manifold is left to kill the
// group. So each call on a container notes, before it gives a delegate its
// config, the delegate's pid (its group's id), its start time and its pid
// namespace; and notes when the delegate ended, by itself or killed and
// waited for. The next call on the container, under the same lock, ends the
// groups whose delegate never ended (a DEL, a GC's DEL, or an ADD, CHECK or
// hot-plug change).
//
// The notes go in the lock file, which every call on the container has open
// already, which a killed call leaves behind, and which the next call on the
// container opens anyway: a note costs a write per delegate's start and end,
// and no file of its own (a file made and removed per call cost 0.15-0.4 ms
// on ext4, on the loaded 2-core test machine). They are written without
// fsync: what a node's crash loses is a group that the reboot ended anyway.
// The call that wrote them truncates the file before it lets go of the lock
// when all its delegates ended, which every call that is not killed does; a
// call that finds the file empty pays one read for it.

// Group is a delegate's process group as a call noted it.
type Group struct {
	// Pgid is the delegate's pid, the id of the group it leads.
	Pgid int
	// Start is the delegate's start time, field 22 of /proc/<pid>/stat
	// (clock ticks since boot): a pid reused by another process has
	// another one.
	Start uint64
	// PidNS is the inode of the pid namespace the pid belongs to; a reader
	// in another one cannot name the process.
	PidNS uint64
}

// GroupLog is where one call, holding a container's lock, notes its
// delegates' process groups (Lock.Groups): the lock file, open for
// appending. Safe for concurrent use: the attachments of a wave run at once.
type GroupLog struct {
	mu    sync.Mutex
	f     *os.File
	open  map[int]struct{} // started and not yet ended, in this call
	dirty bool             // the file may hold notes: close empties it
	keep  bool
	done  bool // closed: the lock is let go
}

// Leftovers returns the process groups that calls before this one noted in
// the lock file and did not see end: those of a call that was killed. A
// line cut short (the writer killed mid-write) is skipped: the group it was
// about had not been given its config yet.
func (g *GroupLog) Leftovers() ([]Group, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b [1]byte
	if n, err := g.f.ReadAt(b[:], 0); n == 0 && errors.Is(err, io.EOF) {
		return nil, nil // the file of every call that was not killed
	}
	g.dirty = true
	var open []Group
	sc := bufio.NewScanner(io.NewSectionReader(g.f, 0, 1<<62))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "+":
			if grp, ok := parseGroup(f[1:]); ok && !g.mine(grp.Pgid) {
				open = append(open, grp)
			}
		case len(f) == 2 && f[0] == "-":
			pgid, err := strconv.Atoi(f[1])
			if err != nil {
				continue
			}
			for i := len(open) - 1; i >= 0; i-- {
				if open[i].Pgid == pgid {
					open = append(open[:i], open[i+1:]...)
					break
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return open, fmt.Errorf("read the process groups noted in %s: %w", g.f.Name(), err)
	}
	return open, nil
}

// mine reports whether this call noted pgid and has not seen it end: not a
// leftover, whatever the order of the calls to Leftovers and Started.
func (g *GroupLog) mine(pgid int) bool {
	_, ok := g.open[pgid]
	return ok
}

func parseGroup(f []string) (Group, bool) {
	pgid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	ns, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || pgid <= 1 {
		return Group{}, false
	}
	return Group{Pgid: pgid, Start: start, PidNS: ns}, true
}

// Started notes the group of a delegate before it is given its config (or
// as soon as it starts, for a process started before its turn). An
// error means that it is not noted: the call goes on, and only a kill of
// it would then leave the group's processes running.
func (g *GroupLog) Started(grp Group) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return fmt.Errorf("note a delegate's process group in %s: the call let go of the lock", g.f.Name())
	}
	if g.open == nil {
		g.open = map[int]struct{}{}
	}
	g.dirty = true
	// The file is open for appending: each line is one write, at the end,
	// after what a call that was killed wrote.
	line := "+ " + strconv.Itoa(grp.Pgid) + " " + strconv.FormatUint(grp.Start, 10) + " " + strconv.FormatUint(grp.PidNS, 10) + "\n"
	if _, err := g.f.WriteString(line); err != nil {
		return fmt.Errorf("note a delegate's process group in %s: %w", g.f.Name(), err)
	}
	g.open[grp.Pgid] = struct{}{}
	return nil
}

// Ended notes that the group's delegate exited by itself (what it left
// running is the plugin's, as when the runtime runs it), or was killed and
// its whole group waited for. A failed write leaves the group to be checked
// by the next call, which finds it gone, or leader and start time not its.
func (g *GroupLog) Ended(pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.open[pgid]; !ok || g.done {
		return
	}
	delete(g.open, pgid)
	g.f.WriteString("- " + strconv.Itoa(pgid) + "\n")
}

// Keep keeps the notes at the end of the call: groups they name were not
// ended (a kill that did not take).
func (g *GroupLog) Keep() {
	g.mu.Lock()
	g.keep = true
	g.mu.Unlock()
}

// close ends the call's notes, before the lock is let go: they are emptied
// when every group this call noted ended and nothing asked to keep them;
// with remove, the file goes instead. It reports whether notes are kept, so
// that the lock file is not removed.
func (g *GroupLog) close(remove bool) (kept bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	if len(g.open) > 0 || g.keep {
		return true
	}
	if g.dirty && !remove {
		if g.f.Truncate(0) != nil {
			return true
		}
		g.dirty = false
	}
	return false
}
