package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/manifold-cni/manifold/netconf"
)

// ErrNoPrimary is returned (wrapped) while the conf dir holds no primary CNI
// config, typically because the cluster's network plugin has not written it yet.
var ErrNoPrimary = errors.New("no primary CNI config")

// Primary is the node's own CNI config: the one the runtime would load if
// manifold were not installed. manifold wraps it as the default network.
type Primary struct {
	Name       string // file name in the conf dir
	CNIVersion string
	// Capabilities are the primary's declared capabilities; for a conflist, the
	// union over its plugins. manifold must declare them too, because libcni
	// hands a runtime setting (portMappings, bandwidth, …) only to plugins that
	// declare it, and manifold is the plugin the runtime calls.
	Capabilities map[string]bool
}

// metaPluginTypes are plugins that must never be wrapped as the default
// network: manifold itself, thin or thick (a config from an earlier install
// under another name), and Multus (a node being migrated), which would nest
// one meta-plugin in another.
var metaPluginTypes = map[string]bool{binaryName: true, shimBinaryName: true, "multus": true, "multus-shim": true}

// FindPrimary returns the alphabetically first .conf, .conflist or .json file
// in dir that is not manifold's own: the same order the runtime (libcni) uses.
// A file named ownName, a file whose name contains "manifold", and a config
// whose plugin is a meta-plugin are passed over. A candidate that cannot be
// parsed is an error rather than skipped: it is most likely being written, and
// the next file in order would be the wrong network.
func FindPrimary(dir, ownName string) (*Primary, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list CNI conf dir %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !isConfigFile(name) || isOurName(name, ownName) {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		// Never a directory (a network's subdirectory chain, named after
		// it, can end in .conf), even behind a symlink, and never a FIFO or
		// a device, which the read would block on.
		if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
			continue
		}
		data, err := readCapped(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since ReadDir
		}
		if err != nil {
			return nil, fmt.Errorf("read primary CNI config: %w", err)
		}
		p, meta, err := parsePrimary(name, data)
		if err != nil {
			return nil, fmt.Errorf("parse primary CNI config %s: %w", path, err)
		}
		if meta {
			continue
		}
		if err := addChainCapabilities(dir, name, data, p); err != nil {
			return nil, fmt.Errorf("primary CNI config %s: %w", path, err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w in %s", ErrNoPrimary, dir)
}

func isConfigFile(name string) bool {
	switch filepath.Ext(name) {
	case ".conf", ".conflist", ".json":
		return true
	}
	return false
}

func isOurName(name, ownName string) bool {
	return name == ownName || strings.Contains(strings.ToLower(name), "manifold")
}

// pluginJSON holds the fields of one CNI plugin config that the installer reads.
type pluginJSON struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// parsePrimary reads a conf or a conflist. Like the runtime, it chooses by
// extension: .conflist is a list, anything else a single plugin config. meta
// reports a meta-plugin config that must not be wrapped.
func parsePrimary(name string, data []byte) (p *Primary, meta bool, err error) {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		pluginJSON
		Plugins []pluginJSON `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, false, fmt.Errorf("decode JSON: %w", err)
	}
	if conf.CNIVersion == "" {
		return nil, false, errors.New(`key "cniVersion" is missing`)
	}
	plugins := []pluginJSON{conf.pluginJSON}
	if filepath.Ext(name) == ".conflist" {
		plugins = conf.Plugins
		if len(plugins) == 0 {
			return nil, false, errors.New(`key "plugins" is missing or empty`)
		}
	}
	caps := map[string]bool{}
	for i, pl := range plugins {
		if pl.Type == "" {
			return nil, false, fmt.Errorf(`plugin %d: key "type" is missing`, i)
		}
		if metaPluginTypes[pl.Type] {
			return nil, true, nil
		}
		for c, on := range pl.Capabilities {
			if on {
				caps[c] = true
			}
		}
	}
	return &Primary{Name: name, CNIVersion: conf.CNIVersion, Capabilities: caps}, false, nil
}

// addChainCapabilities adds to p the capabilities of the plugins the runtime
// chains to a .conflist primary from the subdirectory named after its
// network (libcni's NetworkConfFromFile; docs/configuration.md): a portmap
// there gets portMappings from the runtime only if manifold declares it.
func addChainCapabilities(dir, name string, data []byte, p *Primary) error {
	if filepath.Ext(name) != ".conflist" {
		return nil
	}
	var list struct {
		Name string `json:"name"`
		// Any JSON value; the string forms are libcni's too.
		Inlined any `json:"loadOnlyInlinedPlugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("decode JSON: %w", err)
	}
	switch v := list.Inlined.(type) {
	case bool:
		if v {
			return nil
		}
	case string:
		if strings.EqualFold(v, "true") {
			return nil
		}
	}
	chain, err := netconf.ChainPlugins(dir, list.Name)
	if err != nil {
		return err
	}
	for _, raw := range chain {
		var pl pluginJSON
		if err := json.Unmarshal(raw, &pl); err != nil {
			return err
		}
		for c, on := range pl.Capabilities {
			if on {
				p.Capabilities[c] = true
			}
		}
	}
	return nil
}
