package multus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/manifold-cni/manifold/internal/safefile"
	"github.com/manifold-cni/manifold/scratch"
)

// Remove deletes Multus's record for a container and its libcni cache entries,
// as a successful Multus DEL leaves things (Multus removes the record, libcni
// each entry). Call it only after every attachment was deleted: an entry removed
// early is an attachment nobody can find again. Missing files are not an error,
// so a second Remove succeeds.
//
// A cache file is removed when it is named for the container and either says it
// is for this container or cannot be parsed (a torn write); a parsed entry for
// another container, whose name merely contains this ID, is left alone.
func Remove(dir, containerID string) error {
	if err := scratch.ValidateContainerID(containerID); err != nil {
		return fmt.Errorf("remove Multus state: %w", err)
	}
	var errs []error
	files, err := cacheFiles(dir, containerID)
	if err != nil {
		errs = append(errs, err)
	}
	for _, f := range files {
		if !ownedBy(f, containerID) {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove Multus cache entry: %w", err))
		}
	}
	// The record goes last: while any cache entry is left, the record still
	// explains it.
	if len(errs) == 0 {
		path := filepath.Join(dir, containerID)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove Multus record: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ownedBy says whether a cache file named for containerID may be removed.
func ownedBy(path, containerID string) bool {
	b, err := safefile.ReadNoFollow(path, MaxFileBytes)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) // unreadable, e.g. over the bound: still named for it
	}
	var e struct {
		ContainerID *string `json:"containerId"`
	}
	if json.Unmarshal(b, &e) != nil || e.ContainerID == nil {
		return true
	}
	return *e.ContainerID == containerID
}

// List returns, sorted, the container IDs Multus has state for in dir: a record,
// or cache entries left without one (Multus removes its record even when a
// delegate's DEL fails, and that delegate's cache entry stays), so that GC can
// find both. Names that are not container IDs (the results dir, dot files,
// *.tmp and *.lock files) are skipped.
func List(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list Multus records in %s: %w", dir, err)
	}
	seen := map[string]bool{}
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() || strings.HasSuffix(name, ".tmp") || strings.HasSuffix(name, ".lock") {
			continue
		}
		if scratch.ValidateContainerID(name) == nil {
			seen[name] = true
		}
	}
	cached, err := cachedContainers(dir)
	for _, id := range cached {
		seen[id] = true
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, err
}

// cachedContainers reads the container ID of every cniCacheV1 entry in
// dir/results. The file name cannot tell it: network names may hold '-'.
func cachedContainers(dir string) ([]string, error) {
	rdir := filepath.Join(dir, resultsDir)
	des, err := os.ReadDir(rdir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list Multus cache %s: %w", rdir, err)
	}
	var ids []string
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		b, err := safefile.ReadNoFollow(filepath.Join(rdir, de.Name()), MaxFileBytes)
		if err != nil {
			continue
		}
		var e struct {
			Kind        string `json:"kind"`
			ContainerID string `json:"containerId"`
		}
		if json.Unmarshal(b, &e) != nil || e.Kind != cacheKind {
			continue
		}
		if scratch.ValidateContainerID(e.ContainerID) == nil && strings.Contains(de.Name(), "-"+e.ContainerID+"-") {
			ids = append(ids, e.ContainerID)
		}
	}
	return ids, nil
}
