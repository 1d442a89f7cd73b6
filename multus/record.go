package multus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/manifold-cni/manifold/internal/safefile"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// DefaultDir is Multus's default cniDir, where it keeps its records and its
// libcni result cache.
const DefaultDir = "/var/lib/cni/multus"

// MaxFileBytes bounds every file this package reads. Multus's records and cache
// entries are a few KiB; the bound keeps a damaged or hostile file from costing
// memory on every DEL.
const MaxFileBytes = 16 << 20

// resultsDir is libcni's cache subdirectory under its cache dir.
const resultsDir = "results"

var (
	// ErrUnknownFormat is returned (wrapped) for a record that is not a list of
	// Multus delegates, e.g. one written by Multus v1/v2.
	ErrUnknownFormat = errors.New("not a Multus v3/v4 record")
	// ErrCorrupt is returned (wrapped) for a record that is not valid JSON, e.g.
	// one torn by a crash during Multus's non-atomic write.
	ErrCorrupt = errors.New("corrupt Multus record")
)

// Source says where an attachment's config came from, so the caller can log
// how much to trust it.
type Source string

const (
	// FromCache is the libcni cache entry: the config that ran.
	FromCache Source = "cache"
	// FromConfigList is rebuilt from the record's CNINetworkConfigList.
	FromConfigList Source = "record CNINetworkConfigList"
	// FromRecord is the record's Bytes.
	FromRecord Source = "record Bytes"
)

// Origin tells how one attachment was read.
type Origin struct {
	Source Source
	// Lossy is set when the config is the record's Bytes and those look like
	// Multus's re-encoding of its typed copy, which drops the plugins' own
	// fields: a DEL with it may fail or leak (see the package doc).
	Lossy bool
	// File is the file the config was read from.
	File string
}

// Unexplained is an entry whose config neither the record nor the cache gives
// in a form manifold can run. The caller DELs everything else and then fails,
// naming it, so that an admin can clean it up by hand.
type Unexplained struct {
	// Index is the entry's position in the record (-1 for a cache entry).
	Index int
	// Network is the best name known: the NAD, the network name, or "".
	Network string
	IfName  string
	// File is the record, or the cache entry, that could not be explained.
	File   string
	Reason string
}

// Record is what Multus left for one container, in manifold's vocabulary.
type Record struct {
	ContainerID string
	// NetNS is the netns path of the ADD when a cache entry says, else "".
	NetNS string
	// RuntimeArgs are the runtime's CNI_ARGS as the delegates saw them, from the
	// cache (without IgnoreUnknown, IP and MAC, one pair per key); nil without a
	// cache entry.
	RuntimeArgs [][2]string
	// Attachments are in attachment order; DEL them in reverse.
	Attachments []netconf.Attachment
	// Origins has one element per attachment, at the same index.
	Origins []Origin
	// Unexplained lists the entries that could not be turned into attachments.
	Unexplained []Unexplained
	// Warnings are things the caller should log: skipped cache files, lossy
	// configs.
	Warnings []string
	// HasRecord is false when only cache entries were found (Multus removed the
	// record after a DEL that failed, or the record is unreadable).
	HasRecord bool
}

// UnexplainedError is an error naming every unexplained entry, with the
// container and the file, or nil when there is none.
func (r *Record) UnexplainedError() error {
	if r == nil || len(r.Unexplained) == 0 {
		return nil
	}
	parts := make([]string, 0, len(r.Unexplained))
	for _, u := range r.Unexplained {
		name := u.Network
		if name == "" {
			name = fmt.Sprintf("entry %d", u.Index)
		}
		parts = append(parts, fmt.Sprintf("network %s (interface %q) in %s: %s", name, u.IfName, u.File, u.Reason))
	}
	return fmt.Errorf("container %s: cannot delete what Multus attached: %s", r.ContainerID, strings.Join(parts, "; "))
}

// Options are what the caller knows from the current CNI call, which Multus's
// files do not hold.
type Options struct {
	// IfName is CNI_IFNAME, the default network's interface name, used when no
	// cache entry tells it. Empty means "eth0".
	IfName string
	// CNIVersion is put into a config that has no cniVersion; Multus did the
	// same with its own config's cniVersion. Empty leaves such a config
	// unexplained.
	CNIVersion string
	// AllowedPluginTypes is the node's allowedPluginTypes: an entry that
	// came from a NAD, or whose origin no record tells (a cache entry other
	// than the default network's), must use only these plugin and IPAM
	// types; nil allows any but a meta-plugin, which no entry may use.
	AllowedPluginTypes []string
}

// Load reads Multus's state for one container from dir with default Options.
func Load(dir, containerID string) (*Record, error) {
	return LoadWith(dir, containerID, Options{})
}

// LoadWith reads Multus's record dir/<containerID> and its libcni cache entries
// dir/results/*-<containerID>-* and turns them into attachments.
//
// It returns nil, nil when neither exists: Multus has nothing attached there.
// When the record cannot be read (ErrCorrupt, ErrUnknownFormat, an I/O error),
// it returns that error together with a Record built from the cache alone (nil
// when there is no cache entry either), so the caller can still DEL what the
// cache knows before it reports the error.
func LoadWith(dir, containerID string, opts Options) (*Record, error) {
	if err := scratch.ValidateContainerID(containerID); err != nil {
		return nil, fmt.Errorf("load Multus state: %w", err)
	}
	if opts.IfName == "" {
		opts.IfName = "eth0"
	}
	cache, warnings, cacheErr := readCache(dir, containerID)
	path := filepath.Join(dir, containerID)
	entries, recErr := readRecord(path)

	rec := &Record{ContainerID: containerID, Warnings: warnings}
	rec.NetNS, rec.RuntimeArgs = runtimeFromCache(cache)
	if recErr == nil && entries != nil {
		rec.HasRecord = true
		explain(rec, entries, cache, path, opts)
	} else {
		fromCacheOnly(rec, cache, opts.IfName, opts)
	}
	if recErr != nil || cacheErr != nil {
		err := errors.Join(recErr, cacheErr)
		if len(rec.Attachments) == 0 && len(rec.Unexplained) == 0 {
			return nil, err
		}
		return rec, err
	}
	// Nothing at all is nil; a Record with only warnings (a torn cache file and
	// no record) is returned so that the caller logs them before Remove.
	if !rec.HasRecord && len(cache) == 0 && len(rec.Unexplained) == 0 && len(rec.Warnings) == 0 {
		return nil, nil
	}
	return rec, nil
}

// readRecord returns the record's entries, or nil, nil when there is no record.
func readRecord(path string) ([]rawEntry, error) {
	b, err := safefile.ReadNoFollow(path, MaxFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read Multus record: %w", err)
	}
	entries, err := decodeRecord(b)
	if err != nil {
		return nil, fmt.Errorf("read Multus record %s: %w", path, err)
	}
	return entries, nil
}
