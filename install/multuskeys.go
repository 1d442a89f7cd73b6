package install

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/manifold-cni/manifold/netconf"
)

// multusKeyRule is what the takeover does with one key that Multus v4.3.0
// reads from its config: the thin plugin's file, or in thick mode the shim's
// file with the daemon's ConfigMap laid over it (Multus's daemon copies every
// key of daemon-config.json into each call's config). docs/migration.md has
// the same table for admins; TestMigrationDocListsEveryMultusKey keeps the
// two in step.
type multusKeyRule struct {
	// to is the key of manifold's config that takes the value; "" drops it,
	// for the reason why.
	to  string
	why string
	// multusDefault is Multus's value when its config leaves the key out, set
	// only where it differs from manifold's default: the takeover carries it,
	// so that the node behaves as it did.
	multusDefault any
	// node is the node daemon's flag when the key is a node path: a thick
	// manifold takes those from the daemon's flags, never from a config
	// (docs/security.md), so the takeover does not carry them there.
	node string
	// path says the value is a path (or, for clusterNetwork, may be one): in
	// a thick Multus, a path in its daemon's container (hostPath).
	path bool
}

// multusLogOptions is Multus's log rotation when its config names a logFile:
// lumberjack with these, each replaced by the config's logOptions where set.
// manifold's own default keeps every old file, uncompressed.
var multusLogOptions = map[string]any{"maxAge": 5, "maxSize": 100, "maxBackups": 5, "compress": true}

// multusKeyRules are Multus v4.3.0's keys: its NetConf (pkg/types) and, in
// thick mode, its daemon's (pkg/server ControllerNetConf, pkg/server/config
// MultusConf). A key not here is one Multus does not read.
var multusKeyRules = map[string]multusKeyRule{
	// The same key, the same meaning.
	"clusterNetwork":         {to: "clusterNetwork", path: true},
	"defaultNetworks":        {to: "defaultNetworks"},
	"delegates":              {to: "delegates"},
	"systemNamespaces":       {to: "systemNamespaces"},
	"multusNamespace":        {to: "multusNamespace"},
	"namespaceIsolation":     {to: "namespaceIsolation"},
	"globalNamespaces":       {to: "globalNamespaces"},
	"readinessindicatorfile": {to: "readinessindicatorfile", path: true},
	"logLevel":               {to: "logLevel"},
	"retryDeleteOnError":     {to: "retryDeleteOnError"},
	"auxiliaryCNIChainName":  {to: "auxiliaryCNIChainName"},
	// Multus logs to stderr unless told not to; manifold only without a logFile.
	"logToStderr": {to: "logToStderr", multusDefault: true},
	"logOptions":  {to: "logOptions", multusDefault: multusLogOptions},
	// Node paths. Multus looked for NADs' configs in /etc/cni/multus/net.d,
	// manifold by default in its own dir.
	"confDir": {to: "confDir", multusDefault: "/etc/cni/multus/net.d", node: "conf-dir", path: true},
	"cniDir":  {to: "multusCNIDir", node: "multus-cni-dir", path: true},
	"binDir":  {to: "binDir", node: "bin-dir", path: true},
	// Taken care of by the installer itself.
	"cniVersion":   {to: "cniVersion"},
	"capabilities": {to: "capabilities"},
	"name":         {why: "manifold's config is named by --network-name"},
	"type":         {why: "manifold's config runs manifold, or manifold-shim in thick mode"},
	"kubeconfig":   {why: "Multus's ServiceAccount goes away with Multus; manifold's config names the kubeconfig the installer keeps"},
	"logFile":      {why: "Multus's log file; manifold's goes where --log-file says (none: stderr)"},
	// Set by the runtime on each call, never in a config file.
	"prevResult":                {why: "the runtime's, on each call"},
	"runtimeConfig":             {why: "the runtime's, on each call"},
	"cni.dev/valid-attachments": {why: "the runtime's, on each GC"},
	// CNI's, which Multus decodes and does nothing with.
	"ipam": {why: "Multus does nothing with it"},
	"dns":  {why: "Multus does nothing with it"},
	// The thick daemon's own settings. manifold's node daemon takes its
	// settings from its flags (docs/thick-mode.md).
	"chrootDir":           {why: "the node daemon's --host-root"},
	"socketDir":           {why: "the node daemon's --socket and the installer's --daemon-socket"},
	"daemonSocketDir":     {why: "the installer's --daemon-socket"},
	"cniConfigDir":        {why: "where Multus wrote its config; the installer's --cni-conf-dir"},
	"multusAutoconfigDir": {why: "the installer finds the primary config in its --cni-conf-dir, and clusterNetwork names it"},
	"multusConfigFile":    {why: "the installer generates manifold's config; --config-file installs one as is"},
	"multusMasterCNI":     {why: "the primary Multus chose; clusterNetwork names it"},
	"forceCNIVersion":     {why: "Multus rewrote the primary's cniVersion in its file, which keeps it; manifold never rewrites another's file"},
	"overrideNetworkName": {why: "manifold's config is named by --network-name; the default network keeps its own name in network-status"},
	"perNodeCertificate":  {why: "manifold uses a ServiceAccount token bound to the node (docs/install.md)"},
	"connectionLimit":     {why: "the node daemon bounds its calls in flight itself (docs/thick-mode.md)"},
	"metricsPort":         {why: "the node daemon's --metrics-address"},
	"enablePprof":         {why: "manifold's node daemon has no pprof endpoint"},
}

// keyDecision is what became of one key of Multus's config, for the log.
type keyDecision struct {
	key   string
	value any
	from  string // the file, the ConfigMap, or "Multus's default"
	to    string // the key in manifold's config; "" when dropped
	why   string // why it was dropped, or how it was changed
}

// resolve decides, for every key of Multus's effective config (the file,
// the daemon's ConfigMap over it, and Multus's defaults where they differ
// from manifold's), what manifold's config takes: it fills keys, decisions
// and notCarried. A key set by one of the installer's flags is the flag's.
func (m *multusConfig) resolve(o *Options) {
	eff, from := map[string]any{}, map[string]string{}
	for k, v := range m.plugin {
		eff[k], from[k] = v, m.file
	}
	for k, v := range m.daemon {
		eff[k], from[k] = v, m.daemonFrom
	}
	for k, r := range multusKeyRules {
		if r.multusDefault != nil && isUnset(eff[k]) {
			eff[k], from[k] = r.multusDefault, "Multus's default"
		}
	}
	if lo, ok := eff["logOptions"].(map[string]any); ok && from["logOptions"] != "Multus's default" {
		// Multus fills in what logOptions leaves out with its own rotation.
		merged := map[string]any{}
		for k, v := range multusLogOptions {
			merged[k] = v
		}
		for k, v := range lo {
			merged[k] = v
		}
		eff["logOptions"] = merged
	}
	flags := o.flagKeys()
	node := o.daemonPaths()
	m.keys, m.decisions, m.notCarried = map[string]any{}, nil, nil
	if m.caps == nil {
		m.caps = map[string]bool{}
	}
	for _, k := range sortedKeyNames(eff) {
		v := eff[k]
		d := keyDecision{key: k, value: v, from: from[k]}
		r, known := multusKeyRules[k]
		switch {
		case !known:
			d.why = "Multus v4.3.0 does not read it"
		case r.to == "":
			d.why = r.why
		case isUnset(v):
			d.why = "empty: Multus's default applies"
		case k == "cniVersion":
			switch {
			case m.file == "":
				d.why = "manifold's config takes the cniVersion of the primary config, which the runtime accepts"
			case from[k] == m.file:
				d.to = k
			default:
				d.why = fmt.Sprintf("the runtime reads the cniVersion of %s, %s, which manifold's config keeps", m.file, m.cniVersion)
			}
		case k == "capabilities":
			caps, _ := v.(map[string]any)
			for c, on := range caps {
				if on == true {
					m.caps[c] = true
				}
			}
			d.to = k
		default:
			if s, ok := v.(string); ok && r.path {
				if host, mapped := m.hostPath(o, s); mapped {
					d.why = "a path in Multus's daemon container, " + s + ", on the host " + host
					v, d.value = host, host
				}
			}
			switch {
			case flags[r.to] != "":
				d.why = "the installer's --" + flags[r.to] + " is set, and wins"
			case r.node != "" && node != nil:
				d.why = fmt.Sprintf("a node path: the node daemon's --%s decides, %s", r.node, daemonFlag(node, r.node))
				if s, _ := v.(string); filepath.Clean(s) != filepath.Clean(daemonFlag(node, r.node)) {
					m.notCarried = append(m.notCarried, fmt.Sprintf("%s=%s (the daemon's --%s is %s)", r.to, s, r.node, daemonFlag(node, r.node)))
				}
			default:
				d.to = r.to
				m.keys[r.to] = v
			}
		}
		m.decisions = append(m.decisions, d)
	}
}

// hostPath maps a path of a thick Multus, which is its daemon container's,
// to the host's: under the daemon's cniConfigDir or multusAutoconfigDir (its
// mount of the host's CNI conf dir), it is in the installer's conf dir;
// under /host, where Multus's own DaemonSets mount the host's dirs, it is
// the rest of the path. Any other path was mounted at the same path, as
// Multus's DaemonSets do /etc/cni/multus/net.d and /var/lib/cni/multus.
func (m *multusConfig) hostPath(o *Options, p string) (string, bool) {
	if !m.shim || !filepath.IsAbs(p) {
		return p, false
	}
	clean := filepath.Clean(p)
	dirs := []string{"/etc/cni/net.d"} // the daemon's default cniConfigDir
	for _, k := range []string{"cniConfigDir", "multusAutoconfigDir"} {
		if d, _ := m.daemon[k].(string); filepath.IsAbs(d) {
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	for _, d := range dirs {
		if rel, ok := under(clean, d); ok {
			host := filepath.Join(o.HostCNIConfDir, rel)
			return host, host != clean
		}
	}
	if rel, ok := under(clean, "/host"); ok && rel != "." {
		return "/" + rel, true
	}
	return p, false
}

// under gives p's path below dir, when p is dir or below it.
func under(p, dir string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// isUnset is a value that Multus reads as its default: absent, null or "".
func isUnset(v any) bool { return v == nil || v == "" }

// flagKeys are the keys of manifold's config that one of the installer's
// flags sets, each with its flag: those flags win over Multus's values.
func (o *Options) flagKeys() map[string]string {
	def := DefaultOptions()
	out := map[string]string{}
	for key, f := range map[string]struct {
		flag string
		set  bool
	}{
		"logLevel":               {"log-level", o.LogLevel != def.LogLevel},
		"globalNamespaces":       {"global-namespaces", o.GlobalNamespaces != ""},
		"multusNamespace":        {"multus-namespace", o.MultusNamespace != ""},
		"readinessindicatorfile": {"readiness-indicator-file", o.ReadinessIndicatorFile != ""},
		"namespaceIsolation":     {"namespace-isolation", o.NamespaceIsolation},
		"systemNamespaces":       {"system-namespaces", o.SystemNamespaces.set},
		"defaultNetworks":        {"default-networks", len(o.DefaultNetworks.values) > 0},
		"confDir":                {"conf-dir", o.ConfDir != ""},
		"multusCNIDir":           {"multus-cni-dir", o.MultusCNIDir != ""},
	} {
		if f.set {
			out[key] = f.flag
		}
	}
	return out
}

// logDecisions logs what became of each key of Multus's config, once for
// each change of them: a line per key carried, with the key it became, and
// a line per key dropped, with why.
func (in *installer) logDecisions(m *multusConfig) {
	if m == nil {
		return
	}
	var sum strings.Builder
	for _, d := range m.decisions {
		fmt.Fprintf(&sum, "%s=%s>%s:%s;", d.key, shortJSON(d.value), d.to, d.why)
	}
	if sum.String() == in.multusLogged {
		return
	}
	in.multusLogged = sum.String()
	for _, d := range m.decisions {
		args := []any{"key", d.key, "value", shortJSON(d.value), "from", d.from}
		if d.to == "" {
			in.log.Info("taking the node over from Multus: dropped a key of Multus's config", append(args, "reason", d.why)...)
			continue
		}
		args = append(args, "as", d.to)
		if d.why != "" {
			args = append(args, "note", d.why)
		}
		in.log.Info("taking the node over from Multus: carried a key of Multus's config", args...)
	}
}

// shortJSON is v as JSON, cut short for a log line.
func shortJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// sortedKeyNames are m's keys, sorted.
func sortedKeyNames(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// daemonFlag is the value of one of the node daemon's path flags.
func daemonFlag(node *netconf.NodePaths, flag string) string {
	switch flag {
	case "conf-dir":
		return node.ConfDir
	case "multus-cni-dir":
		return node.MultusCNIDir
	case "bin-dir":
		return node.BinDir
	}
	return ""
}
