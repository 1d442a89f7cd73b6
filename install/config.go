package install

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/manifold-cni/manifold/netconf"
)

// GenerateConfig builds manifold's conflist for the given primary config: a
// single manifold plugin whose default network (clusterNetwork) is the
// primary's file on the host. It takes the primary's cniVersion, a version
// this node's runtime is known to accept, so the runtime sees results in the
// same version as it did without manifold; and the primary's capabilities,
// with the pod's annotations (netconf.CapPodAnnotations) added.
//
// In thick mode the plugin is manifold-shim with the daemon's socket; every
// other key stays the same, because the daemon, and the manifold binary that
// the shim falls back to, read the config exactly as the thin plugin does.
func GenerateConfig(p *Primary, o *Options) ([]byte, error) {
	return generateConfig(p, o, nil)
}

// generateConfig is GenerateConfig with the keys carried over from Multus's config,
// when the node is taken over from Multus (m non-nil).
func generateConfig(p *Primary, o *Options, m *multusConfig) ([]byte, error) {
	plugin := map[string]any{
		"type":           o.pluginType(),
		"clusterNetwork": filepath.Join(o.HostCNIConfDir, p.Name),
		"kubeconfig":     filepath.Join(o.hostCredDir(), kubeconfigName),
		"binDir":         o.HostCNIBinDir,
	}
	// The primary's capabilities, so that the runtime passes their args on to
	// it, and the pod's annotations, so that ADD need not read the pod.
	caps := map[string]bool{netconf.CapPodAnnotations: true}
	for c, on := range p.Capabilities {
		if on {
			caps[c] = true
		}
	}
	plugin["capabilities"] = caps
	for key, v := range map[string]string{
		"daemonSocket":           o.DaemonSocket,
		"cniDir":                 o.CNIDir,
		"confDir":                o.ConfDir,
		"multusCNIDir":           o.MultusCNIDir,
		"logLevel":               o.LogLevel,
		"logFile":                o.LogFile,
		"globalNamespaces":       o.GlobalNamespaces,
		"multusNamespace":        o.MultusNamespace,
		"readinessindicatorfile": o.ReadinessIndicatorFile,
	} {
		if v != "" {
			plugin[key] = v
		}
	}
	if o.NamespaceIsolation {
		plugin["namespaceIsolation"] = true
	}
	if o.SystemNamespaces.set {
		plugin["systemNamespaces"] = o.SystemNamespaces.values
	}
	if len(o.DefaultNetworks.values) > 0 {
		plugin["defaultNetworks"] = o.DefaultNetworks.values
	}
	if m != nil {
		applyMultus(plugin, m)
	}
	extra, err := o.additional()
	if err != nil {
		return nil, err
	}
	// The admin's additional keys come last and win: they are the escape hatch
	// for anything the flags do not cover. "type" is guarded in additional().
	for key, v := range extra {
		plugin[key] = v
	}
	if err := checkPlugin(plugin, p.CNIVersion, o.NetworkName, o.daemonPaths()); err != nil {
		return nil, err
	}
	list := struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}{p.CNIVersion, o.NetworkName, []map[string]any{plugin}}
	// encoding/json sorts map keys, so the same inputs give the same bytes and
	// an unchanged config is never rewritten.
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifold config: %w", err)
	}
	return append(out, '\n'), nil
}

// checkPlugin runs the plugin config through manifold's own parser, as libcni
// will hand it over (with the list's name and cniVersion), and in thick mode
// (node non-nil) through the daemon's check of its node paths. A config that
// manifold or the daemon rejects would fail every pod on the node, so it is
// never installed: a bad flag, a bad --additional-config value, a node path
// the daemon does not serve, or a primary with a cniVersion manifold does not
// support is an error here instead.
func checkPlugin(plugin map[string]any, cniVersion, name string, node *netconf.NodePaths) error {
	conf := make(map[string]any, len(plugin)+2)
	for k, v := range plugin {
		conf[k] = v
	}
	conf["cniVersion"], conf["name"] = cniVersion, name
	stdin, err := json.Marshal(conf)
	if err != nil {
		return fmt.Errorf("encode manifold config: %w", err)
	}
	parsed, err := netconf.ParseConfig(stdin)
	if err != nil {
		return fmt.Errorf("generated config would be refused by manifold: %w", err)
	}
	if len(parsed.Warnings) > 0 {
		// manifold works around these on every call; the installer, which
		// an admin watches, refuses them.
		return fmt.Errorf("generated config has a problem that manifold would work around on every call: %s", strings.Join(parsed.Warnings, "; "))
	}
	if node != nil {
		if err := node.Apply(stdin, parsed); err != nil {
			return fmt.Errorf("generated config would be refused by the node daemon: %w", err)
		}
	}
	return nil
}
