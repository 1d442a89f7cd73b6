package netconf

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// PassthruType is the plugin type of an auxiliary chain's first plugin,
// which manifold answers itself (package delegate): an empty result, the
// prevResult that the chained plugins after it need. No file of that name is
// ever run, and a network from a NAD may not use it (MetaPluginTypes).
const PassthruType = "manifold-passthru"

// AuxiliaryNetwork is the auxiliary chain of auxiliaryCNIChainName (Multus >=
// 4.2; docs/configuration.md): a network named after the key, whose plugins
// are PassthruType and then the plugin configs of the chain directory
// <dir of clusterNetwork>/<auxiliaryCNIChainName>/*.conf, read as
// ChainPlugins reads a network's subdirectory chain. It is nil when the key
// is unset, or when the directory holds no .conf file: there is nothing to
// run then. As with Multus, clusterNetwork must be a path (contain "/"),
// since its directory is where the chain directory is.
func AuxiliaryNetwork(conf *Config) (*Network, error) {
	name := conf.AuxiliaryCNIChainName
	if name == "" {
		return nil, nil
	}
	cluster := strings.TrimSpace(conf.ClusterNetwork)
	if !strings.Contains(cluster, "/") {
		return nil, Invalid("key \"auxiliaryCNIChainName\" (%q) needs \"clusterNetwork\" to be a file path, since the chain directory is next to it; clusterNetwork is %q", name, cluster)
	}
	dir := filepath.Dir(cluster)
	chain, err := ChainPlugins(dir, name)
	if err != nil {
		return nil, Invalid("key \"auxiliaryCNIChainName\": %v", err)
	}
	if len(chain) == 0 {
		return nil, nil
	}
	plugins := append([]json.RawMessage{json.RawMessage(`{"type":"` + PassthruType + `"}`)}, chain...)
	b, err := json.Marshal(map[string]any{"cniVersion": conf.CNIVersion, "name": name, "plugins": plugins})
	if err != nil {
		return nil, fmt.Errorf("encode the auxiliary chain %s: %w", name, err)
	}
	n, err := ParseNetwork(b, "")
	if err != nil {
		return nil, Invalid("key \"auxiliaryCNIChainName\": the chain in %s: %v", filepath.Join(dir, name), err)
	}
	return n, nil
}
