package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MultusDisabledSuffix is appended to the name of Multus's config when the
// installer takes a node over from Multus: the runtime loads only .conf,
// .conflist and .json files, so the renamed file can never be loaded again by
// accident, and it stays next to manifold's for the way back
// (docs/migration.md).
const MultusDisabledSuffix = ".disabled-by-manifold"

// multusConfig is what the installer takes from Multus's config.
type multusConfig struct {
	file       string         // the file it was read from (maybe already renamed)
	active     []string       // Multus configs the runtime could still load
	shim       bool           // its plugin is multus-shim: a thick Multus, whose settings are in its daemon's ConfigMap
	plugin     map[string]any // the plugin's keys as in the file, with a conflist's cniVersion and name
	cniVersion string
	caps       map[string]bool

	// daemon is, for a thick Multus, its daemon's daemon-config.json, whose
	// keys Multus laid over the file's on every call; daemonFrom says where
	// it was read (multusdaemon.go).
	daemon     map[string]any
	daemonFrom string

	// Filled by resolve (multuskeys.go): the keys manifold's config takes,
	// what became of each key, and in thick mode the node paths of Multus
	// that differ from the node daemon's, as "key=value (...)" for the log.
	keys       map[string]any
	decisions  []keyDecision
	notCarried []string
}

// hasDefault says whether Multus's config names the default network itself.
func (m *multusConfig) hasDefault() bool {
	return m != nil && (m.keys["clusterNetwork"] != nil || m.keys["delegates"] != nil)
}

// findMultus looks for Multus's config in dir: a .conf/.conflist/.json whose
// plugin is multus or multus-shim, or one that an earlier run renamed. The
// keys come from the alphabetically first loadable one (the one the runtime
// used), else from the first renamed one, so that a second run gives the same
// config as the first. nil when there is none.
func findMultus(dir string) (*multusConfig, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list CNI conf dir %s: %w", dir, err)
	}
	var active, disabled []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		switch {
		case isConfigFile(name):
			active = append(active, name)
		case strings.HasSuffix(name, MultusDisabledSuffix) && isConfigFile(strings.TrimSuffix(name, MultusDisabledSuffix)):
			disabled = append(disabled, name)
		}
	}
	sort.Strings(active)
	sort.Strings(disabled)
	var m *multusConfig
	for _, names := range [][]string{active, disabled} {
		for _, name := range names {
			data, err := readCapped(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			c, ok := parseMultus(strings.TrimSuffix(name, MultusDisabledSuffix), data)
			if !ok {
				continue
			}
			if m == nil {
				m = c
				m.file = name
			}
			if isConfigFile(name) {
				m.active = append(m.active, name)
			}
		}
	}
	return m, nil
}

// parseMultus reads a Multus config: a single plugin of type multus or
// multus-shim, or a conflist whose first plugin is.
func parseMultus(name string, data []byte) (*multusConfig, bool) {
	var top map[string]any
	if json.Unmarshal(data, &top) != nil {
		return nil, false
	}
	plugin := top
	if filepath.Ext(name) == ".conflist" {
		ps, _ := top["plugins"].([]any)
		if len(ps) == 0 {
			return nil, false
		}
		plugin, _ = ps[0].(map[string]any)
	}
	if plugin == nil || (plugin["type"] != "multus" && plugin["type"] != "multus-shim") {
		return nil, false
	}
	m := &multusConfig{plugin: map[string]any{}, caps: map[string]bool{}, shim: plugin["type"] == "multus-shim"}
	m.cniVersion, _ = top["cniVersion"].(string)
	for k, v := range plugin {
		m.plugin[k] = v
	}
	for _, k := range []string{"cniVersion", "name"} {
		if _, ok := m.plugin[k]; !ok && top[k] != nil {
			m.plugin[k] = top[k]
		}
	}
	if caps, ok := plugin["capabilities"].(map[string]any); ok {
		for c, on := range caps {
			if on == true {
				m.caps[c] = true
			}
		}
	}
	return m, true
}

// daemonOnlyMultus stands for a thick Multus whose shim config is gone
// (Multus's daemon removes it when it stops) but whose daemon's config is
// there: its settings are taken over all the same. Its primary is the one
// the installer finds, as Multus's "auto" mode found it.
func daemonOnlyMultus() *multusConfig {
	return &multusConfig{shim: true, plugin: map[string]any{}, caps: map[string]bool{}}
}

// applyMultus puts the keys resolve chose into manifold's plugin config;
// --additional-config, applied after, wins over them.
func applyMultus(plugin map[string]any, m *multusConfig) {
	for k, v := range m.keys {
		if k != "cniVersion" && k != "capabilities" {
			plugin[k] = v
		}
	}
	if m.keys["clusterNetwork"] == nil && m.keys["delegates"] != nil {
		delete(plugin, "clusterNetwork") // Multus's default network is delegates[0]
	}
	caps, _ := plugin["capabilities"].(map[string]bool)
	for c := range m.caps {
		caps[c] = true
	}
}

// multusPrimary is the primary for a Multus config that names its default
// network itself: its cniVersion and capabilities are what the runtime used.
func multusPrimary(m *multusConfig) (*Primary, error) {
	if m.file == "" {
		// A thick Multus's daemon config alone: the runtime read no config
		// of Multus's, and the daemon's cniVersion is what Multus wrote.
		v, _ := m.daemon["cniVersion"].(string)
		if v == "" {
			return nil, fmt.Errorf("the daemon config of Multus (%s) names the default network but has no cniVersion", m.daemonFrom)
		}
		return &Primary{Name: "Multus's daemon config", CNIVersion: v, Capabilities: m.caps}, nil
	}
	if m.cniVersion == "" {
		return nil, fmt.Errorf("the Multus config %s has no cniVersion", m.file)
	}
	return &Primary{Name: m.file, CNIVersion: m.cniVersion, Capabilities: m.caps}, nil
}

// carried are the names of the keys that manifold's config takes from
// Multus's, sorted.
func (m *multusConfig) carried() []string {
	return sortedKeyNames(m.keys)
}

// disableMultus renames every Multus config the runtime could still load, once
// manifold's own is in place. Renaming over an earlier renamed copy is fine:
// the newest is kept.
func (in *installer) disableMultus(m *multusConfig) error {
	if m == nil {
		return nil
	}
	if nc := m.notCarried; len(nc) > 0 && len(m.active) > 0 {
		in.log.Warn("taking the node over from Multus in thick mode: Multus's node paths are not carried, the node daemon's flags decide; "+
			"to keep using them, give both the installer and the daemon --conf-dir and --multus-cni-dir with Multus's values, and mount them in the daemon (docs/migration.md)",
			"notCarried", strings.Join(nc, ", "))
	}
	var errs []error
	for _, name := range m.active {
		from := filepath.Join(in.o.CNIConfDir, name)
		to := from + MultusDisabledSuffix
		if err := os.Rename(from, to); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("move Multus's config out of the way: %w", err))
			continue
		}
		in.log.Info("took the node over from Multus: moved its config out of the runtime's way", "from", from, "to", to,
			"carriedOver", strings.Join(m.carried(), ","))
	}
	if len(errs) == 0 && len(m.active) > 0 {
		errs = append(errs, syncDir(in.o.CNIConfDir))
	}
	return errors.Join(errs...)
}
