package scratch

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The process groups of a container's delegates: cniDir/.groups-<containerID>.
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
// The file is written without fsync: what a node's crash loses is a group
// that the reboot ended anyway. The call that wrote it removes it before it
// lets go of the lock when all its delegates ended, which is every call that
// is not killed; so a DEL normally finds no file, and pays one failed open.

const groupsPrefix = ".groups-"

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

// GroupsPath is the file of containerID's delegates' process groups.
func (s *Store) GroupsPath(containerID string) string {
	return filepath.Join(s.Dir, groupsPrefix+containerID)
}

// Groups returns the process groups of containerID's delegates that a call
// started and did not see end: those of a call that was killed; and
// whether there is a file at all. A line cut short (the writer killed
// mid-write) is skipped: the group it was about had not been given its
// config yet.
func (s *Store) Groups(containerID string) ([]Group, bool, error) {
	if err := ValidateContainerID(containerID); err != nil {
		return nil, false, err
	}
	f, err := openRead(s.GroupsPath(containerID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("read the process groups of container %s: %w", containerID, err)
	}
	defer f.Close()
	var open []Group
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "+":
			g, ok := parseGroup(f[1:])
			if ok {
				open = append(open, g)
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
		return open, true, fmt.Errorf("read the process groups of container %s: %w", containerID, err)
	}
	return open, true, nil
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

// RemoveGroups removes containerID's process-group file, once every group
// it names has ended. Call it holding the container's lock.
func (s *Store) RemoveGroups(containerID string) error {
	if err := os.Remove(s.GroupsPath(containerID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the process groups of container %s: %w", containerID, err)
	}
	return nil
}

// GroupLog is where one call, holding a container's lock, notes its
// delegates' process groups (Lock.Groups). Safe for concurrent use: the
// attachments of a wave run at once.
type GroupLog struct {
	path string

	mu   sync.Mutex
	f    *os.File
	open map[int]struct{} // started and not yet ended, in this call
	keep bool
}

// Started notes the group of a delegate before it is given its config. An
// error means that it is not noted: the call goes on, and only a kill of
// it would then leave the group's processes running.
func (g *GroupLog) Started(grp Group) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f == nil {
		// O_APPEND: each line is one write, at the end, whoever wrote
		// before (a call that was killed).
		f, err := os.OpenFile(g.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("note a delegate's process group in %s: %w", g.path, err)
		}
		g.f = f
		g.open = map[int]struct{}{}
	}
	line := "+ " + strconv.Itoa(grp.Pgid) + " " + strconv.FormatUint(grp.Start, 10) + " " + strconv.FormatUint(grp.PidNS, 10) + "\n"
	if _, err := g.f.WriteString(line); err != nil {
		return fmt.Errorf("note a delegate's process group in %s: %w", g.path, err)
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
	if _, ok := g.open[pgid]; !ok {
		return
	}
	delete(g.open, pgid)
	g.f.WriteString("- " + strconv.Itoa(pgid) + "\n")
}

// Keep keeps the file at the end of the call: groups it names were not
// ended (a kill that did not take).
func (g *GroupLog) Keep() {
	g.mu.Lock()
	g.keep = true
	g.mu.Unlock()
}

// close ends the call's notes: the file goes when every group this call
// noted ended and nothing asked to keep it. Before the lock is let go, so
// that the next call's notes are never removed with these.
func (g *GroupLog) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f == nil {
		return
	}
	if len(g.open) == 0 && !g.keep {
		os.Remove(g.path)
	}
	g.f.Close()
	g.f = nil
}
