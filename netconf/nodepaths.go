package netconf

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
)

// NodePaths are the node-level keys of manifold's config that the node
// daemon fixes with its own flags (docs/security.md, "The node daemon"); the
// installer holds the config it writes in thick mode to the same check. Whoever
// reaches the socket sends the config, and these keys decide what the
// privileged daemon runs (binDir), reads and writes (cniDir, confDir,
// logFile) and with which identity it talks to the API server (kubeconfig).
// A request may leave them out, or repeat the daemon's value; any other value
// is refused.
type NodePaths struct {
	BinDir     string
	CNIDir     string
	ConfDir    string
	Kubeconfig string
	LogFile    string
	// Where a pod's devices are learnt, and where their Device Info files
	// are written (docs/devices.md).
	PodResourcesSocket string
	DeviceCheckpoint   string
	DeviceInfoDir      string
	// MultusCNIDir is where DEL, CHECK and GC read, and remove, what Multus
	// left (config key multusCNIDir); "none" turns that off.
	MultusCNIDir string
	// MultusConfDir is searched after ConfDir (config key multusConfDir);
	// "none" turns that off.
	MultusConfDir string
}

// RegisterFlags adds the daemon's flags for the node paths to fs.
func (n *NodePaths) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&n.BinDir, "bin-dir", DefaultBinDir, "the CNI bin dir (config key binDir): the only place delegates are found; CNI_PATH from the runtime is ignored")
	fs.StringVar(&n.CNIDir, "cni-dir", DefaultCNIDir, "scratch records and the delegates' result cache (config key cniDir)")
	fs.StringVar(&n.ConfDir, "conf-dir", DefaultConfDir, "where networks named by name are looked up (config key confDir)")
	fs.StringVar(&n.Kubeconfig, "kubeconfig", "", "the API server's kubeconfig (config key kubeconfig); empty: in-cluster when KUBERNETES_SERVICE_HOST is set, else no API")
	fs.StringVar(&n.LogFile, "log-file", "", "the calls' log file (config key logFile); empty: each call's log goes back to the runtime on stderr")
	fs.StringVar(&n.PodResourcesSocket, "pod-resources-socket", DefaultPodResourcesSocket, "the kubelet's PodResources socket (config key podResourcesSocket)")
	fs.StringVar(&n.DeviceCheckpoint, "device-checkpoint", DefaultDeviceCheckpoint, "the kubelet's device checkpoint, read when the socket is absent (config key deviceCheckpoint)")
	fs.StringVar(&n.DeviceInfoDir, "device-info-dir", DefaultDeviceInfoDir, "the Device Info spec's directory (config key deviceInfoDir)")
	fs.StringVar(&n.MultusCNIDir, "multus-cni-dir", DefaultMultusCNIDir, "Multus's cniDir, where DEL, CHECK and GC read what Multus attached (config key multusCNIDir); \"none\" turns that off")
	fs.StringVar(&n.MultusConfDir, "multus-conf-dir", DefaultMultusConfDir, "Multus's confDir, searched after --conf-dir (config key multusConfDir); \"none\" turns that off")
}

// keys lists each node key: its config name, its flag, and the field.
func (n *NodePaths) keys(c *Config) []nodeKey {
	return []nodeKey{
		{"binDir", "bin-dir", n.BinDir, &c.BinDir},
		{"cniDir", "cni-dir", n.CNIDir, &c.CNIDir},
		{"confDir", "conf-dir", n.ConfDir, &c.ConfDir},
		{"kubeconfig", "kubeconfig", n.Kubeconfig, &c.Kubeconfig},
		{"logFile", "log-file", n.LogFile, &c.LogFile},
		// Unset, these are the defaults: only logFile and kubeconfig mean
		// something when empty.
		{"podResourcesSocket", "pod-resources-socket", cmp.Or(n.PodResourcesSocket, DefaultPodResourcesSocket), &c.PodResourcesSocket},
		{"deviceCheckpoint", "device-checkpoint", cmp.Or(n.DeviceCheckpoint, DefaultDeviceCheckpoint), &c.DeviceCheckpoint},
		{"deviceInfoDir", "device-info-dir", cmp.Or(n.DeviceInfoDir, DefaultDeviceInfoDir), &c.DeviceInfoDir},
		{"multusCNIDir", "multus-cni-dir", n.MultusCNIDir, &c.MultusCNIDir},
		{"multusConfDir", "multus-conf-dir", cmp.Or(n.MultusConfDir, DefaultMultusConfDir), &c.MultusConfDir},
	}
}

type nodeKey struct {
	key, flag, daemon string
	conf              *string
}

// Validate checks the flags: every path that is set is absolute.
func (n *NodePaths) Validate() error {
	for _, k := range n.keys(&Config{}) {
		if k.daemon != "" && k.daemon != MultusCNIDirOff && k.daemon != MultusConfDirOff && !filepath.IsAbs(k.daemon) {
			return fmt.Errorf("--%s %q is not an absolute path", k.flag, k.daemon)
		}
	}
	for _, k := range []nodeKey{{flag: "bin-dir", daemon: n.BinDir}, {flag: "cni-dir", daemon: n.CNIDir}, {flag: "conf-dir", daemon: n.ConfDir}} {
		if k.daemon == "" {
			return fmt.Errorf("--%s must be set", k.flag)
		}
	}
	return nil
}

// Apply puts the daemon's node paths into conf, parsed from stdin. A key that
// the request set (to a non-empty string: an empty one means "not set", as in
// ParseConfig) must equal the daemon's, or the call is refused with code 7,
// naming the key, both values and the flag.
func (n *NodePaths) Apply(stdin []byte, conf *Config) error {
	var raw struct {
		BinDir     string `json:"binDir"`
		CNIDir     string `json:"cniDir"`
		ConfDir    string `json:"confDir"`
		Kubeconfig string `json:"kubeconfig"`
		LogFile    string `json:"logFile"`

		PodResourcesSocket string `json:"podResourcesSocket"`
		DeviceCheckpoint   string `json:"deviceCheckpoint"`
		DeviceInfoDir      string `json:"deviceInfoDir"`
		// multusCNIDir as sent; ParseConfig has put the default into the
		// parsed config, so the raw value tells "not set".
		MultusCNIDir  string `json:"multusCNIDir"`
		MultusConfDir string `json:"multusConfDir"`
	}
	// ParseConfig has decoded the same bytes into the same string fields.
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return Invalid("invalid manifold config: %v", err)
	}
	sent := NodePaths{raw.BinDir, raw.CNIDir, raw.ConfDir, raw.Kubeconfig, raw.LogFile, raw.PodResourcesSocket, raw.DeviceCheckpoint, raw.DeviceInfoDir, raw.MultusCNIDir, raw.MultusConfDir}
	mine := n.keys(conf)
	for i, k := range sent.keys(conf) {
		d := mine[i]
		if k.daemon != "" && !samePath(k.daemon, d.daemon) {
			return Invalid("invalid manifold config: key %q is %q, but this node's daemon serves %q (its --%s): the daemon does not take node paths from a request; leave the key out or set the daemon's value", k.key, k.daemon, d.daemon, d.flag)
		}
		*k.conf = d.daemon
	}
	return nil
}

// samePath compares two paths as the file system would resolve them, without
// looking at it: "/opt/cni/bin/" is "/opt/cni/bin".
func samePath(a, b string) bool {
	return a == b || (a != "" && b != "" && filepath.Clean(a) == filepath.Clean(b))
}
