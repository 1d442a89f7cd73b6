package netconf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// MaxChainPlugins caps the plugin configs read from one network's
// subdirectory. Real chains hold one or two (a tuning, a portmap); the cap
// keeps a directory full of files from costing every pod start.
const MaxChainPlugins = 64

// Subdirectory chaining (libcni >= 1.3, NetworkConfFromFile): a conflist
// read from a file gets, after its own plugins, the plugin configs found in
// the directory <the file's dir>/<the network's name>/, one per ".conf" file,
// in file-name order, unless the conflist sets "loadOnlyInlinedPlugins".
// containerd and CRI-O load their default network this way, and Multus its
// clusterNetwork; manifold loads every network it reads from a file so.
//
// A single plugin config (no "plugins" key) gets no chain: the runtimes and
// libcni's own LoadNetworkConf read such a file with ConfFromFile, which
// has none.
//
// The subdirectory is node state, held to the rules of the rest of the conf
// dir and more: its entries are opened without following a symlink and only
// when they are regular files (a FIFO would block the call), each file and
// the chain as a whole are capped at MaxConfigBytes, the plugins at
// MaxChainPlugins, and every plugin's type and IPAM type must be a plain
// binary name. A file that breaks a rule fails the network, naming the
// file: dropping it would attach the pod without a plugin the admin chained.

// withChain returns n, read from path (raw is the file's content), with the
// plugins of its subdirectory chain appended; n itself when there are none.
func withChain(path string, raw []byte, n *Network) (*Network, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	rawPlugins, isList := top["plugins"]
	if !isList {
		return n, nil
	}
	inlinedOnly, err := readLibcniBool(top, "loadOnlyInlinedPlugins")
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if inlinedOnly {
		return n, nil
	}
	chain, err := ChainPlugins(filepath.Dir(path), n.Name)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if len(chain) == 0 {
		return n, nil
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(rawPlugins, &plugins); err != nil {
		return nil, fmt.Errorf("load %s: \"plugins\" is not a list: %w", path, err)
	}
	top["plugins"], err = json.Marshal(append(plugins, chain...))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	merged, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	chained, err := ParseNetwork(merged, "")
	if err != nil {
		return nil, fmt.Errorf("load %s with the plugins of %s: %w", path, filepath.Join(filepath.Dir(path), n.Name), err)
	}
	return chained, nil
}

// ChainPlugins reads the plugin configs of the chain directory dir/name: the
// ".conf" files in it, in file-name order, each checked as described above.
// A directory that does not exist is an empty chain. name must be a valid
// network name (ValidateNetworkName), as libcni and Multus require before
// they make it a path.
func ChainPlugins(dir, name string) ([]json.RawMessage, error) {
	if err := ValidateNetworkName(name); err != nil {
		return nil, err
	}
	sub := filepath.Join(dir, name)
	st, err := os.Lstat(sub)
	switch {
	case os.IsNotExist(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read plugin chain %s: %w", sub, err)
	case st.Mode()&os.ModeSymlink != 0:
		return nil, fmt.Errorf("read plugin chain %s: it is a symlink; a network's chain directory must be a directory", sub)
	case !st.IsDir():
		// libcni fails here too (it cannot list it).
		return nil, fmt.Errorf("read plugin chain %s: it is not a directory", sub)
	}
	entries, err := os.ReadDir(sub) // sorted by file name, as libcni reads it
	if err != nil {
		return nil, fmt.Errorf("read plugin chain %s: %w", sub, err)
	}
	var out []json.RawMessage
	total := 0
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".conf" {
			continue
		}
		file := filepath.Join(sub, e.Name())
		if len(out) == MaxChainPlugins {
			return nil, fmt.Errorf("read plugin chain %s: more than %d .conf files", sub, MaxChainPlugins)
		}
		b, err := safefile.ReadNoFollow(file, MaxConfigBytes)
		if err != nil {
			return nil, fmt.Errorf("read chained plugin config: %w", err)
		}
		if total += len(b); total > MaxConfigBytes {
			return nil, fmt.Errorf("read plugin chain %s: its files hold more than the limit of %d bytes", sub, MaxConfigBytes)
		}
		var p map[string]json.RawMessage
		if err := json.Unmarshal(b, &p); err != nil || p == nil {
			return nil, fmt.Errorf("parse chained plugin config %s: not a JSON object: %v", file, err)
		}
		if err := checkPlugin(p); err != nil {
			return nil, fmt.Errorf("chained plugin config %s: %w", file, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// checkPlugin applies ParseNetwork's rules for one plugin to a chained one,
// so that the error can name its file: a "type" that is a plain binary name,
// the same for "ipam"."type", and "capabilities" an object of booleans.
func checkPlugin(p map[string]json.RawMessage) error {
	var typ string
	if err := optString(p, "type", &typ); err != nil {
		return err
	}
	if typ == "" {
		return fmt.Errorf("no \"type\"")
	}
	if !isPlainBinaryName(typ) {
		return fmt.Errorf("type %q is not a plain binary name", typ)
	}
	if _, err := ipamTypeOf(p); err != nil {
		return err
	}
	if raw, ok := p["capabilities"]; ok {
		var caps map[string]bool
		if err := json.Unmarshal(raw, &caps); err != nil {
			return fmt.Errorf("bad \"capabilities\": %w", err)
		}
	}
	return nil
}

// readLibcniBool reads a conflist's boolean key as libcni does: absent is
// false; a JSON boolean, or the string "true" or "false" in any case.
func readLibcniBool(top map[string]json.RawMessage, key string) (bool, error) {
	raw, ok := top[key]
	if !ok {
		return false, nil
	}
	var b bool
	if string(raw) != "null" && json.Unmarshal(raw, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch strings.ToLower(s) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, fmt.Errorf("%q must be true or false, got %s", key, truncate(string(raw), 40))
}
