package netconf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// MaxConfigBytes caps any one network config we read, from stdin, a file or a NAD.
// Real configs are a few KiB; the cap keeps a hostile or corrupt input from costing
// memory on every pod start.
const MaxConfigBytes = 1 << 20

// networkNameRE is libcni's rule for network names.
var networkNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Network is one delegate network, normalised to a conflist.
type Network struct {
	// Name is the CNI network name ("name" of the conflist).
	Name string
	// CNIVersion is the version libcni runs the conflist in: its cniVersion,
	// or the highest of its cniVersions that libcni implements; "" when it
	// gives none (RunVersion).
	CNIVersion string
	// Bytes is the conflist JSON: a single plugin config is wrapped into a list of one.
	Bytes []byte
	// Capabilities is the union of the capabilities that the plugins declare.
	Capabilities map[string]bool
	// Types lists the plugin types, in order (for logs and error messages).
	Types []string
	// IPAMTypes lists each plugin's "ipam"."type", in the same order; "" for a
	// plugin with none.
	IPAMTypes []string
}

// ValidateNetworkName checks a CNI network name against libcni's rule. libcni
// makes the name part of a cache file's path (results/<network>-<container>-<ifname>)
// and checks it only at ADD, so a name read back from a file is checked here
// before it reaches libcni again.
func ValidateNetworkName(name string) error {
	if !networkNameRE.MatchString(name) {
		return fmt.Errorf("network name %q is not valid: it must start with a letter or digit, followed by letters, digits, '_', '.' or '-'", truncate(name, 80))
	}
	return nil
}

// ParseNetwork reads a single plugin config or a conflist. If the config has no
// name, defaultName is injected (DESIGN §3: a NAD's name stands in for a missing one).
func ParseNetwork(raw []byte, defaultName string) (*Network, error) {
	if len(raw) > MaxConfigBytes {
		return nil, fmt.Errorf("network config is %d bytes, more than the limit of %d", len(raw), MaxConfigBytes)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("parse network config: %w", err)
	}
	var name, cniVersion string
	var err error
	if err := optString(top, "name", &name); err != nil {
		return nil, err
	}
	if err := optString(top, "cniVersion", &cniVersion); err != nil {
		return nil, err
	}
	if name == "" {
		name = defaultName
	}
	if name == "" {
		return nil, fmt.Errorf("network config has no \"name\"")
	}
	// libcni refuses such a name at ADD time (utils.ValidateNetworkName); refusing
	// it here names the config instead of failing half-way through a pod's ADD.
	if err := ValidateNetworkName(name); err != nil {
		return nil, err
	}
	// As libcni resolves it: a conflist's "cniVersions" gives the highest
	// version this libcni implements, and a config with no version at all
	// runs as CNI 0.1.0 (the plugins are given none, as libcni gives them).
	if _, isList := top["plugins"]; isList {
		if cniVersion, err = listVersion(top, cniVersion); err != nil {
			return nil, fmt.Errorf("network %q: %w", name, err)
		}
	}

	var plugins []map[string]json.RawMessage
	if rawPlugins, isList := top["plugins"]; isList {
		if err := json.Unmarshal(rawPlugins, &plugins); err != nil {
			return nil, fmt.Errorf("network %q: \"plugins\" is not a list of objects: %w", name, err)
		}
		if len(plugins) == 0 {
			return nil, fmt.Errorf("network %q: \"plugins\" is empty", name)
		}
	} else {
		plugins = []map[string]json.RawMessage{top}
	}

	n := &Network{Name: name, CNIVersion: cniVersion, Capabilities: map[string]bool{}}
	for i, p := range plugins {
		var typ string
		if err := optString(p, "type", &typ); err != nil {
			return nil, fmt.Errorf("network %q plugin %d: %w", name, i, err)
		}
		if typ == "" {
			return nil, fmt.Errorf("network %q plugin %d has no \"type\"", name, i)
		}
		if !isPlainBinaryName(typ) {
			return nil, fmt.Errorf("network %q plugin %d: type %q is not a plain binary name", name, i, typ)
		}
		n.Types = append(n.Types, typ)
		ipamType, err := ipamTypeOf(p)
		if err != nil {
			return nil, fmt.Errorf("network %q plugin %d: %w", name, i, err)
		}
		n.IPAMTypes = append(n.IPAMTypes, ipamType)
		if rawCaps, ok := p["capabilities"]; ok {
			var caps map[string]bool
			if err := json.Unmarshal(rawCaps, &caps); err != nil {
				return nil, fmt.Errorf("network %q plugin %d: bad \"capabilities\": %w", name, i, err)
			}
			for k, v := range caps {
				if v {
					n.Capabilities[k] = true
				}
			}
		}
	}

	// Re-emit as a conflist. The name is set at the top (libcni injects it into every
	// plugin), and a single config keeps all its keys as the list's only plugin.
	list := map[string]any{}
	if _, isList := top["plugins"]; isList {
		for k, v := range top {
			list[k] = v
		}
	} else {
		if cniVersion != "" {
			list["cniVersion"] = cniVersion
		}
		list["plugins"] = []any{top}
		for _, k := range []string{"disableCheck", "disableGC"} {
			if v, ok := top[k]; ok {
				list[k] = v
			}
		}
	}
	list["name"] = name
	b, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("encode network %q: %w", name, err)
	}
	n.Bytes = b
	return n, nil
}

// listVersion is the cniVersion libcni (NetworkConfFromBytes) runs a
// conflist in: with "cniVersions", the highest of those and "cniVersion"
// that is not above the version this libcni implements; else "cniVersion".
// A version libcni cannot parse is an error, as it is libcni's.
func listVersion(top map[string]json.RawMessage, cniVersion string) (string, error) {
	raw, ok := top["cniVersions"]
	if !ok {
		return cniVersion, nil
	}
	var listed []string
	if err := json.Unmarshal(raw, &listed); err != nil {
		return "", fmt.Errorf("\"cniVersions\" must be a list of strings, got %s", truncate(string(raw), 40))
	}
	if cniVersion != "" {
		listed = append(listed, cniVersion)
	}
	best := ""
	for _, v := range listed {
		above, err := version.GreaterThan(v, version.Current())
		if err != nil {
			return "", fmt.Errorf("\"cniVersions\": %q is not a version: %w", truncate(v, 32), err)
		}
		if above {
			continue // libcni skips the versions it does not implement
		}
		if best == "" {
			best = v
		} else if gt, _ := version.GreaterThan(v, best); gt {
			best = v
		}
	}
	if best == "" {
		return cniVersion, nil
	}
	return best, nil
}

// RunVersion is the version a network's plugins run in: its cniVersion, or
// 0.1.0 for a network that gives none (CNI's rule, which libcni and the
// plugins' skel follow).
func (n *Network) RunVersion() string {
	if n.CNIVersion == "" {
		return "0.1.0"
	}
	return n.CNIVersion
}

// ipamTypeOf is a plugin's "ipam"."type": the plugin runs it from the same
// bin dirs as itself, so it is held to the same rules as "type".
func ipamTypeOf(plugin map[string]json.RawMessage) (string, error) {
	var ipam map[string]json.RawMessage
	if raw, ok := plugin["ipam"]; !ok || json.Unmarshal(raw, &ipam) != nil {
		return "", nil // none, or not an object: the plugin itself refuses the latter
	}
	var typ string
	if err := optString(ipam, "type", &typ); err != nil {
		return "", fmt.Errorf("\"ipam\": %w", err)
	}
	if typ != "" && !isPlainBinaryName(typ) {
		return "", fmt.Errorf("ipam type %q is not a plain binary name", typ)
	}
	return typ, nil
}

func optString(m map[string]json.RawMessage, key string, dst *string) error {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%q must be a string, got %s", key, truncate(string(raw), 40))
	}
	return nil
}

// LoadNetworkFile reads a .conf, .json or .conflist file, with the plugins
// of its subdirectory chain (chain.go), as libcni's NetworkConfFromFile
// loads it.
func LoadNetworkFile(path string) (*Network, error) {
	b, n, err := parseNetworkFile(path)
	if err != nil {
		return nil, err
	}
	return withChain(path, b, n)
}

// parseNetworkFile reads and parses one config file, without its chain.
func parseNetworkFile(path string) ([]byte, *Network, error) {
	b, err := safefile.Read(path, MaxConfigBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("read network config: %w", err)
	}
	n, err := ParseNetwork(b, "")
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	return b, n, nil
}

// LoadNetworkPath resolves a path given for clusterNetwork or defaultNetworks: a
// file, or a directory whose alphabetically first config file is used.
func LoadNetworkPath(path string) (*Network, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load network from %s: %w", path, err)
	}
	if !st.IsDir() {
		return LoadNetworkFile(path)
	}
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load network from %s: no .conf, .conflist or .json file in the directory", path)
	}
	return LoadNetworkFile(files[0])
}

// FindNetworkInDirs looks in each of dirs in turn (Config.ConfDirs) for a
// config whose name is name, as FindNetworkInDir does, and returns the first
// found and the directory it was found in. An error in one directory is
// returned at once: a broken file of manifold's own is not passed over for
// one in Multus's directory.
func FindNetworkInDirs(dirs []string, name string) (*Network, string, error) {
	for _, dir := range dirs {
		n, err := FindNetworkInDir(dir, name)
		if err != nil {
			return nil, dir, err
		}
		if n != nil {
			return n, dir, nil
		}
	}
	return nil, "", nil
}

// FindNetworkInDir looks in dir for a config whose name is name. A .conflist wins
// over a .conf or .json of the same name; among files of one kind the
// alphabetically first wins. Files that do not parse are skipped, so one broken
// file cannot hide a good one. It returns nil, nil when nothing matches. The
// match gets its subdirectory chain (chain.go), and a chain that cannot be
// read is an error: the file is the network's, and the next one is not.
func FindNetworkInDir(dir, name string) (*Network, error) {
	files, err := configFiles(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var single *Network
	var singleRaw []byte
	var singlePath string
	for _, f := range files {
		isList := strings.HasSuffix(f, ".conflist")
		if !isList && single != nil {
			continue
		}
		b, n, err := parseNetworkFile(f)
		if err != nil || n.Name != name {
			continue
		}
		if isList {
			return withChain(f, b, n)
		}
		single, singleRaw, singlePath = n, b, f
	}
	if single == nil {
		return nil, nil
	}
	return withChain(singlePath, singleRaw, single)
}

// configFiles lists the CNI config files in dir, sorted by name.
func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
