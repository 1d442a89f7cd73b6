package scratch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const lockDirName = "locks"

// Lock is an exclusive per-container lock that serialises ADD, DEL and CHECK on
// one container across processes.
type Lock struct {
	f      *os.File
	path   string
	groups *GroupLog
}

// ErrLockTimeout is returned when the lock was not free before the deadline.
var ErrLockTimeout = errors.New("timed out waiting for the container lock")

// Lock takes the container's lock, waiting until ctx is done. The lock file is
// removed by Unlock(remove=true) on DEL; because another process may be waiting on
// the old file, a taker checks after flock that the file it locked is still the one
// at the path, and retries if not.
func (s *Store) Lock(ctx context.Context, containerID string) (*Lock, error) {
	if err := ValidateContainerID(containerID); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, lockDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, containerID)
	delay := time.Millisecond
	for {
		// Not through a symlink, and nothing but a regular file: whoever
		// left something else at the path, it is not opened for writing.
		// Appending: the holder notes its delegates' process groups in
		// it (GroupLog).
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open lock for %s: %w", containerID, err)
		}
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("open lock for %s: %s is not a regular file", containerID, path)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if samePath(f, path) {
				return &Lock{f: f, path: path, groups: &GroupLog{f: f}}, nil
			}
			f.Close()
			continue
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", containerID, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock container %s: %w", containerID, ErrLockTimeout)
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// samePath reports whether the open file is still the file at path.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

// Groups is where the call holding the lock notes its delegates' process
// groups; Unlock ends those notes.
func (l *Lock) Groups() *GroupLog { return l.groups }

// Unlock releases the lock. With remove, the lock file is deleted first, while the
// lock is still held, so no file is left behind for a container that is gone;
// unless it keeps notes of process groups that were not ended
// (GroupLog.close), for the next call.
func (l *Lock) Unlock(remove bool) {
	if l.groups.close(remove) {
		remove = false
	}
	if remove {
		os.Remove(l.path)
	}
	l.f.Close()
}

// SweepLocks removes the lock files of containers that have no record and
// whose lock no call holds, and returns how many it removed. A lock file
// outlives its call only when the process holding it dies (a node's crash
// or reboot, a SIGKILL) before DEL removes it; when the runtime forgets that
// container (a sandbox whose set-up never finished), no DEL will ever name
// it again. A call in progress holds the flock, and a container with a
// record still has its pod, so both are left alone; a taker that opened the
// file just before its removal sees that it is no longer the file at the
// path, as after Unlock(remove=true), and takes a new one.
//
// The records are listed once, so a sweep costs two directory reads and
// nothing per container that has a record: on a node with 100 pods an
// lstat per lock file cost 0.40 ms per sweep, every DEL (0.13 ms now;
// BenchmarkSweepLocks).
func (s *Store) SweepLocks() int {
	dir := filepath.Join(s.Dir, lockDirName)
	locks, err := os.ReadDir(dir)
	if err != nil || len(locks) == 0 {
		return 0
	}
	records, err := os.ReadDir(s.Dir)
	if err != nil {
		return 0
	}
	recorded := make(map[string]struct{}, len(records))
	for _, e := range records {
		recorded[e.Name()] = struct{}{}
	}
	removed := 0
	for _, e := range locks {
		id := e.Name()
		if _, ok := recorded[id]; ok || !e.Type().IsRegular() || ValidateContainerID(id) != nil {
			continue
		}
		// No record when the directory was read; the flock and the
		// checks after it decide. Anything but a regular file (a
		// symlink, a device) is not ours, and not opened.
		path := filepath.Join(dir, id)
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		// A file that holds notes of process groups that a killed call
		// left running is the next DEL's or GC's to deal with.
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && samePath(f, path) && !s.hasRecord(id) && !holdsNotes(f) {
			if os.Remove(path) == nil {
				removed++
			}
		}
		f.Close()
	}
	return removed
}

// hasRecord reports whether containerID's record file exists (or cannot be
// told not to).
func (s *Store) hasRecord(containerID string) bool {
	_, err := os.Lstat(s.Path(containerID))
	return !errors.Is(err, os.ErrNotExist)
}

// holdsNotes reports whether a lock file holds notes of process groups
// (GroupLog), or cannot be told not to.
func holdsNotes(f *os.File) bool {
	fi, err := f.Stat()
	return err != nil || fi.Size() > 0
}

// LockPath is the lock file of a container, where the holder of its lock
// notes its delegates' process groups.
func (s *Store) LockPath(containerID string) string {
	return filepath.Join(s.Dir, lockDirName, containerID)
}
