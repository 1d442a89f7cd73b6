package multus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// cacheKind is libcni's cache format tag (libcni v0.8 and later).
const cacheKind = "cniCacheV1"

// Keys of CNI_ARGS that belong to one attachment, not to the runtime: Multus adds
// MAC= and IP= for an annotation's "mac" and "ips". Kubernetes runtimes send
// neither, so they are taken as the attachment's everywhere.
const (
	argIP            = "IP"
	argMAC           = "MAC"
	argIgnoreUnknown = "IgnoreUnknown"
)

// cacheEntry is one libcni cache file.
type cacheEntry struct {
	Kind           string         `json:"kind"`
	ContainerID    string         `json:"containerId"`
	Config         []byte         `json:"config"`
	IfName         string         `json:"ifName"`
	NetworkName    string         `json:"networkName"`
	NetNS          string         `json:"netns"`
	CNIArgs        [][2]string    `json:"cniArgs"`
	CapabilityArgs map[string]any `json:"capabilityArgs"`

	file string
	used bool
}

// cacheFiles lists the files in dir/results that are named for containerID
// (libcni names them <network>-<containerID>-<ifname>), sorted by name.
func cacheFiles(dir, containerID string) ([]string, error) {
	rdir := filepath.Join(dir, resultsDir)
	des, err := os.ReadDir(rdir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list Multus cache %s: %w", rdir, err)
	}
	infix := "-" + containerID + "-"
	var files []string
	for _, de := range des {
		if de.Type().IsRegular() && strings.Contains(de.Name(), infix) {
			files = append(files, filepath.Join(rdir, de.Name()))
		}
	}
	return files, nil
}

// readCache reads the container's cache entries. A file that is not a
// cniCacheV1 entry for this container is skipped with a warning: the record, or
// the other entries, may still explain everything.
func readCache(dir, containerID string) ([]*cacheEntry, []string, error) {
	files, err := cacheFiles(dir, containerID)
	if err != nil {
		return nil, nil, err
	}
	var entries []*cacheEntry
	var warnings []string
	for _, f := range files {
		b, err := safefile.ReadNoFollow(f, MaxFileBytes)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("skip cache file %s: %v", f, err))
			continue
		}
		var e cacheEntry
		if err := json.Unmarshal(b, &e); err != nil {
			warnings = append(warnings, fmt.Sprintf("skip cache file %s: %v", f, err))
			continue
		}
		if e.Kind != cacheKind {
			warnings = append(warnings, fmt.Sprintf("skip cache file %s: kind %q is not %s", f, e.Kind, cacheKind))
			continue
		}
		if e.ContainerID != containerID {
			continue // another container's, whose name merely holds this ID
		}
		e.file = f
		entries = append(entries, &e)
	}
	return entries, warnings, nil
}

// runtimeFromCache is the netns and the runtime's CNI_ARGS as the delegates saw
// them. Multus sends its own K8S_POD_* keys and then the runtime's CNI_ARGS, so
// keys repeat; each key is kept once, where it first appeared, with its last
// value (the runtime's own).
func runtimeFromCache(cache []*cacheEntry) (string, [][2]string) {
	var netns string
	var out [][2]string
	at := map[string]int{}
	for _, e := range cache {
		if netns == "" {
			netns = e.NetNS
		}
		for _, kv := range e.CNIArgs {
			switch kv[0] {
			case argIgnoreUnknown, argIP, argMAC:
				continue
			}
			if i, ok := at[kv[0]]; ok {
				out[i][1] = kv[1]
				continue
			}
			at[kv[0]] = len(out)
			out = append(out, kv)
		}
	}
	return netns, out
}

// attachmentArgs are the cache entry's MAC= and IP=, in their order.
func attachmentArgs(e *cacheEntry) [][2]string {
	var out [][2]string
	for _, kv := range e.CNIArgs {
		if kv[0] == argIP || kv[0] == argMAC {
			out = append(out, kv)
		}
	}
	return out
}

// findCache is the unused cache entry for network and ifName.
func findCache(cache []*cacheEntry, network, ifName string) *cacheEntry {
	for _, e := range cache {
		if !e.used && e.NetworkName == network && e.IfName == ifName {
			return e
		}
	}
	return nil
}

// defaultIfName is the interface the first entry got: CNI_IFNAME of the ADD,
// which only a cache entry still knows. claimed are the names the other entries
// got.
func defaultIfName(cache []*cacheEntry, network string, claimed map[string]bool, fallback string) string {
	var candidates []string
	for _, e := range cache {
		if e.NetworkName == network && !claimed[e.IfName] {
			if e.IfName == fallback {
				return fallback
			}
			candidates = append(candidates, e.IfName)
		}
	}
	if len(candidates) == 1 {
		return candidates[0]
	}
	return fallback
}

// fromCacheOnly turns cache entries into attachments when there is no usable
// record: the default interface first, then the others by the number in
// "net<i>", then by name. defaultIf is the default network's interface, or ""
// when none of them is the default network.
func fromCacheOnly(rec *Record, cache []*cacheEntry, defaultIf string, opts Options) {
	sorted := append([]*cacheEntry(nil), cache...)
	sort.SliceStable(sorted, func(i, j int) bool {
		oi, oj := ifOrder(sorted[i].IfName, defaultIf), ifOrder(sorted[j].IfName, defaultIf)
		return oi < oj || (oi == oj && sorted[i].IfName < sorted[j].IfName)
	})
	for _, e := range sorted {
		att, err := attachmentFromCache(e, "", "", opts)
		if err == nil {
			att.IsDefault = e.IfName == defaultIf
			// No record says where it came from: all but the default
			// network may have come from a NAD.
			err = checkAttachment(&att, !att.IsDefault, opts)
		}
		if err != nil {
			rec.Unexplained = append(rec.Unexplained, Unexplained{Index: -1, Network: e.NetworkName, IfName: e.IfName, File: e.file, Reason: err.Error()})
			continue
		}
		rec.Attachments = append(rec.Attachments, att)
		rec.Origins = append(rec.Origins, Origin{Source: FromCache, File: e.file})
	}
}

// ifOrder ranks an interface name for attachment order.
func ifOrder(name, defaultIf string) int {
	if name == defaultIf {
		return -1
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "net")); err == nil && strings.HasPrefix(name, "net") && n >= 0 {
		return n
	}
	return 1 << 30
}
