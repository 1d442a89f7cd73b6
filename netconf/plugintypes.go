package netconf

import (
	"fmt"
	"slices"
	"strings"
)

// MetaPluginTypes are the plugin types that a network from a NAD may never
// use: manifold's own binaries and Multus's. Run as a delegate, such a plugin
// reads the NAD's config as its own config, and obeys its binDir, cniDir,
// logFile and kubeconfig as root: a NAD's author could make the node run a
// binary of their choosing, or write files where they say (docs/security.md).
// PassthruType is here too: manifold answers it itself, only as an
// auxiliary chain's first plugin.
var MetaPluginTypes = []string{"manifold", "manifold-shim", "manifold-install", "multus", "multus-shim", "multus-daemon", PassthruType}

// NestedEnv is set in the environment of every delegate that manifold runs.
// manifold and manifold-shim refuse to run when they find it: whatever path
// led to them (a plugin that chains or delegates to another, a binary under
// another name), a nested manifold would obey a config that is not the
// node's.
const NestedEnv = "MANIFOLD_DELEGATE_OF"

// IsMetaPluginType reports whether typ names one of MetaPluginTypes.
func IsMetaPluginType(typ string) bool {
	return slices.Contains(MetaPluginTypes, typ)
}

// CheckPluginTypes applies the rules for networks from a NAD to n: no plugin
// and no IPAM plugin may be a meta-plugin, and when allowed is set, each must
// be in it. The IPAM type counts, because the plugin that reads it runs it
// from the same bin dirs with the network's whole config on stdin. nad names
// the network in the error (code 7). Networks that Multus attached from a
// NAD are held to the same rules (package multus).
func CheckPluginTypes(nad string, n *Network, allowed []string) error {
	check := func(what string, i int, typ string) error {
		if IsMetaPluginType(typ) {
			return Invalid("network %s: plugin %d %s %q is a meta-plugin; a network from a NAD may not run manifold or Multus, which would obey the NAD's own binDir, cniDir, logFile and kubeconfig as root (docs/security.md)", nad, i, what, typ)
		}
		if allowed != nil && !slices.Contains(allowed, typ) {
			return Invalid("network %s: plugin %d %s %q is not in the node's allowedPluginTypes (%s)", nad, i, what, typ, strings.Join(allowed, ", "))
		}
		return nil
	}
	for i, typ := range n.Types {
		if err := check("type", i, typ); err != nil {
			return err
		}
	}
	for i, typ := range n.IPAMTypes {
		if typ == "" {
			continue
		}
		if err := check("ipam type", i, typ); err != nil {
			return err
		}
	}
	return nil
}

// validateAllowedTypes checks the allowedPluginTypes key: plain binary names,
// none of them a meta-plugin.
func validateAllowedTypes(types []string) error {
	for i, typ := range types {
		if !isPlainBinaryName(typ) {
			return fmt.Errorf("key \"allowedPluginTypes\"[%d]: %q is not a plain binary name", i, typ)
		}
		if IsMetaPluginType(typ) {
			return fmt.Errorf("key \"allowedPluginTypes\"[%d]: %q is a meta-plugin, which a network from a NAD may never use", i, typ)
		}
	}
	return nil
}

// isPlainBinaryName reports whether typ can only name a file in a bin dir.
func isPlainBinaryName(typ string) bool {
	return typ != "" && typ != "." && typ != ".." && !strings.ContainsAny(typ, "/\\\x00")
}
