package scratch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

// MaxContainerIDLen bounds a container ID. Runtimes use 64 hex characters; the
// bound leaves room for other runtimes while keeping the file name sane.
const MaxContainerIDLen = 256

var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

// reserved names live beside the records in cniDir.
var reserved = map[string]bool{"results": true, lockDirName: true}

// ValidateContainerID checks a container ID before it becomes part of a path: no
// separators, no "..", no leading dot, bounded length.
func ValidateContainerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("container ID is empty")
	case len(id) > MaxContainerIDLen:
		return fmt.Errorf("container ID is %d characters, more than %d", len(id), MaxContainerIDLen)
	case !containerIDPattern.MatchString(id) || strings.Contains(id, ".."):
		return fmt.Errorf("container ID %q may hold only letters, digits, '_', '.' and '-', and must start with a letter or digit", truncateID(id))
	case reserved[id]:
		return fmt.Errorf("container ID %q is reserved", id)
	}
	return nil
}

func truncateID(id string) string {
	if len(id) > 80 {
		return id[:80] + "…"
	}
	return id
}

// Store keeps records as files named by container ID in one directory.
type Store struct {
	Dir string
}

// Path is the record file of a container. The ID must be valid.
func (s *Store) Path(containerID string) string { return filepath.Join(s.Dir, containerID) }

// Save writes a record atomically: temp file, fsync, rename, fsync of the directory.
// After a crash the file is either the old record, the new one, or absent;
// a crash mid-save leaves the temp file too, for the container's DEL
// (RemoveTemp) or GC (Leftovers). Call it holding the container's lock.
func (s *Store) Save(r *Record) error {
	if err := ValidateContainerID(r.ContainerID); err != nil {
		return err
	}
	b, err := Encode(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create scratch dir %s: %w", s.Dir, err)
	}
	// One writer at a time (the container's lock): a file that a writer
	// killed mid-save left is written over.
	tmpName := s.TempPath(r.ContainerID)
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("save scratch record for %s: %w", r.ContainerID, err)
	}
	_, werr := tmp.Write(b)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmpName, s.Path(r.ContainerID))
	}
	if werr != nil {
		os.Remove(tmpName)
		return fmt.Errorf("save scratch record for %s: %w", r.ContainerID, werr)
	}
	return syncDir(s.Dir)
}

// Load reads a container's record. It returns (nil, nil) when there is none; an
// error wrapping ErrCorrupt when the file is damaged, or ErrUnknownVersion when
// it is of a format version this manifold cannot read. Errors name the file.
func (s *Store) Load(containerID string) (*Record, error) {
	if err := ValidateContainerID(containerID); err != nil {
		return nil, err
	}
	path := s.Path(containerID)
	f, err := openRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load scratch record %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRecordBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load scratch record %s: %w", path, err)
	}
	r, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("load scratch record %s: %w", path, err)
	}
	if r.ContainerID != containerID {
		return nil, fmt.Errorf("load scratch record %s: %w: it is for container %q", path, ErrCorrupt, r.ContainerID)
	}
	return r, nil
}

// Remove deletes a container's record. A missing record is not an error.
func (s *Store) Remove(containerID string) error {
	if err := ValidateContainerID(containerID); err != nil {
		return err
	}
	if err := os.Remove(s.Path(containerID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove scratch record for %s: %w", containerID, err)
	}
	return syncDir(s.Dir)
}

// List returns the container IDs that have a record, including damaged ones, and
// removes the temp files that a manifold before .new-<containerID> left
// (tempLegacyPrefix), which no DEL looks for.
func (s *Store) List() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list scratch records in %s: %w", s.Dir, err)
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		if strings.HasPrefix(name, tempLegacyPrefix) {
			os.Remove(filepath.Join(s.Dir, name))
			continue
		}
		if ValidateContainerID(name) == nil {
			ids = append(ids, name)
		}
	}
	return ids, nil
}

// openRead opens a record, or the store's directory, for reading. It opens
// with O_NONBLOCK, which a regular file or a directory ignores: os.OpenFile
// then leaves the descriptor's flags alone, where without it Go sets
// O_NONBLOCK, tries the netpoller, and clears the flag again, four fcntl
// calls per open (docs/performance-history.md, change 23). Something else
// left at a record's path (a FIFO) reads as empty instead of blocking the
// open.
func openRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// syncDir makes dir's entries durable.
func syncDir(dir string) error {
	d, err := openRead(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// tempPrefix and tempLegacyPrefix name the temp files of Save. The temp
// file of a container has one name, .new-<containerID>: Save runs under
// the container's lock, so there is one writer, and DEL removes what a
// writer killed mid-save left with one unlink. Before, it was
// .tmp-<containerID>-<random digits>, which only a read of the directory
// could find.
const (
	tempPrefix       = ".new-"
	tempLegacyPrefix = ".tmp-"
)

// TempPath is the temp file that Save writes containerID's record to.
func (s *Store) TempPath(containerID string) string {
	return filepath.Join(s.Dir, tempPrefix+containerID)
}

// RemoveTemp removes the temp file that a Save of containerID left when it
// was killed. Call it holding the container's lock.
func (s *Store) RemoveTemp(containerID string) error {
	if err := ValidateContainerID(containerID); err != nil {
		return err
	}
	if err := os.Remove(s.TempPath(containerID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the temp record of container %s: %w", containerID, err)
	}
	return nil
}

// Leftovers lists, sorted, the containers that have a temp record or a
// lock file that holds notes of process groups (GroupLog): what a call
// killed on them left, which GC hands to DEL when the runtime no longer
// lists the container, whether or not it has a record.
func (s *Store) Leftovers() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list leftovers in %s: %w", s.Dir, err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), tempPrefix); ok && ValidateContainerID(id) == nil {
			seen[id] = true
		}
	}
	locks, _ := os.ReadDir(filepath.Join(s.Dir, lockDirName))
	for _, e := range locks {
		if !e.Type().IsRegular() || ValidateContainerID(e.Name()) != nil {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Size() > 0 {
			seen[e.Name()] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}
