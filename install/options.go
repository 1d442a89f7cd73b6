// Package install is the node installer that the manifold DaemonSet runs: it
// copies the manifold binary (and, in thick mode, manifold-shim) into the
// host's CNI bin dir, writes manifold's CNI config in front of the node's own
// (primary) config, keeps the plugin's kubeconfig credentials fresh, and
// follows changes to the primary config.
package install

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/manifold-cni/manifold/netconf"
)

// Options is everything the installer needs. Paths come in two flavours: the
// installer runs in a pod that mounts the host's directories somewhere (the
// plain fields), while the files it writes are read by the runtime and by
// manifold on the host, so any path written into them is the host's (the Host*
// fields).
type Options struct {
	CNIBinDir      string // the host CNI bin dir, as mounted in the installer
	CNIConfDir     string // the host CNI conf dir, as mounted in the installer
	HostCNIBinDir  string // the CNI bin dir as the host sees it
	HostCNIConfDir string // the CNI conf dir as the host sees it

	Binary              string        // the manifold binary to install; empty skips the copy
	ShimBinary          string        // the manifold-shim binary to install; empty skips the copy (ParseFlags defaults it in thick mode)
	DaemonBinary        string        // the manifold-daemon binary to install beside manifold; empty: the one beside Binary, if there is one
	DaemonSocket        string        // the node daemon's socket as the host sees it; set, it selects thick mode
	ConfigFile          string        // a user-supplied config, copied as is; empty generates one
	ConfigName          string        // file name of the config written into CNIConfDir
	NetworkName         string        // "name" of the generated conflist
	CleanupConfigOnExit bool          // remove our config when the installer is stopped
	PrimaryWaitTimeout  time.Duration // how long to wait for a primary config; 0 waits forever
	PollInterval        time.Duration // how often to look again when no event arrives

	TokenFile string // the pod's projected ServiceAccount token
	CAFile    string // the cluster CA, as mounted in the pod
	APIServer string // API server URL; empty means https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT

	// manifold config keys (DESIGN §2). Empty or unset ones are left out, so
	// that manifold's own defaults apply.
	CNIDir                 string
	ConfDir                string
	MultusCNIDir           string
	LogLevel               string
	LogFile                string
	NamespaceIsolation     bool
	GlobalNamespaces       string
	MultusNamespace        string
	ReadinessIndicatorFile string
	SystemNamespaces       listFlag
	DefaultNetworks        listFlag
	AdditionalConfig       string // a JSON object merged into the plugin config last
	// MultusDaemonConfig is the thick Multus daemon's ConfigMap, as
	// namespace/name, read when the node being taken over runs a thick
	// Multus (multusdaemon.go); empty turns the read off.
	MultusDaemonConfig string

	// noNotify turns fsnotify off, so tests can cover the poll fallback.
	noNotify bool
	// newClient and now, when set, replace the installer's API client and
	// clock (tests).
	newClient func() (kubernetes.Interface, error)
	now       func() time.Time
}

// Defaults for the installer's flags.
const (
	DefaultConfigName  = "00-manifold.conflist"
	DefaultNetworkName = "manifold-cni-network"
	// DefaultShimBinary is where the image puts manifold-shim. It is the
	// default of --shim-binary in thick mode only: a thin-mode node has no
	// use for the shim.
	DefaultShimBinary = "/usr/local/bin/manifold-shim"
	// credDirName is the directory under the conf dir that holds the plugin's
	// kubeconfig, token and CA. Runtimes do not descend into subdirectories.
	credDirName    = "manifold.d"
	kubeconfigName = "manifold.kubeconfig"
	tokenName      = "token"
	caName         = "ca.crt"
	// The names the binaries get in the CNI bin dir. A config's "type" is the
	// file name the runtime runs, and the shim looks for its fallback under
	// binaryName next to itself.
	binaryName       = "manifold"
	shimBinaryName   = "manifold-shim"
	daemonBinaryName = "manifold-daemon"
	// maxSocketPath is the longest unix socket path Linux accepts: sun_path
	// is 108 bytes, and the path is NUL-terminated.
	maxSocketPath = 107
)

// DefaultOptions returns the options that fit deployments/daemonset.yaml.
func DefaultOptions() *Options {
	return &Options{
		CNIBinDir:          "/host/opt/cni/bin",
		CNIConfDir:         "/host/etc/cni/net.d",
		HostCNIBinDir:      "/opt/cni/bin",
		HostCNIConfDir:     "/etc/cni/net.d",
		Binary:             "/usr/local/bin/manifold",
		ConfigName:         DefaultConfigName,
		NetworkName:        DefaultNetworkName,
		PrimaryWaitTimeout: 10 * time.Minute,
		PollInterval:       30 * time.Second,
		TokenFile:          "/var/run/secrets/kubernetes.io/serviceaccount/token",
		CAFile:             "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
		CNIDir:             "/var/lib/cni/manifold",
		LogLevel:           "error",
		MultusDaemonConfig: DefaultMultusDaemonConfig,
	}
}

// ParseFlags parses the installer's command line into Options.
func ParseFlags(name string, args []string) (*Options, error) {
	o := DefaultOptions()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// The shim is installed by default in thick mode only, and an explicit
	// --shim-binary= (empty) still turns the copy off there.
	shimSet := false
	fs.Visit(func(f *flag.Flag) { shimSet = shimSet || f.Name == "shim-binary" })
	if o.thick() && !shimSet {
		o.ShimBinary = DefaultShimBinary
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.CNIBinDir, "cni-bin-dir", o.CNIBinDir, "the host's CNI bin dir, as mounted in this container")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", o.CNIConfDir, "the host's CNI conf dir, as mounted in this container")
	fs.StringVar(&o.HostCNIBinDir, "host-cni-bin-dir", o.HostCNIBinDir, "the CNI bin dir as the host sees it (manifold's binDir)")
	fs.StringVar(&o.HostCNIConfDir, "host-cni-conf-dir", o.HostCNIConfDir, "the CNI conf dir as the host sees it (for paths written into the config)")
	fs.StringVar(&o.Binary, "binary", o.Binary, "the manifold binary to copy into the CNI bin dir; empty skips the copy")
	fs.StringVar(&o.DaemonBinary, "daemon-binary", o.DaemonBinary, "the manifold-daemon binary to copy into the CNI bin dir beside manifold, which runs it to ask the kubelet for a pod's devices; empty: manifold-daemon beside --binary, if there is one")
	fs.StringVar(&o.ShimBinary, "shim-binary", o.ShimBinary, "the manifold-shim binary to copy into the CNI bin dir; empty skips the copy (default "+DefaultShimBinary+" with --daemon-socket, else empty)")
	fs.StringVar(&o.DaemonSocket, "daemon-socket", o.DaemonSocket, "thick mode: the manifold daemon's unix socket as the host sees it; the config then runs manifold-shim, which calls the daemon there")
	fs.StringVar(&o.ConfigFile, "config-file", o.ConfigFile, "install this CNI config as is instead of generating one")
	fs.StringVar(&o.ConfigName, "config-name", o.ConfigName, "file name of manifold's config in the conf dir; must sort before the primary config")
	fs.StringVar(&o.NetworkName, "network-name", o.NetworkName, "\"name\" of the generated conflist")
	fs.BoolVar(&o.CleanupConfigOnExit, "cleanup-config-on-exit", o.CleanupConfigOnExit, "remove manifold's config on SIGTERM, so the node falls back to the primary config")
	fs.DurationVar(&o.PrimaryWaitTimeout, "primary-wait-timeout", o.PrimaryWaitTimeout, "give up (exit 1) when no primary CNI config appears within this time; 0 waits forever")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "look at the watched files this often even without a filesystem event")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "the pod's projected ServiceAccount token, copied to the host for manifold")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "the cluster CA bundle, copied to the host for manifold")
	fs.StringVar(&o.APIServer, "api-server", o.APIServer, "API server URL for manifold's kubeconfig (default from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&o.CNIDir, "cni-dir", o.CNIDir, "manifold's cniDir: scratch records and result cache on the host")
	fs.StringVar(&o.ConfDir, "conf-dir", o.ConfDir, "manifold's confDir (a host path; default "+netconf.DefaultConfDir+"); in thick mode, the node daemon's --conf-dir")
	fs.StringVar(&o.MultusCNIDir, "multus-cni-dir", o.MultusCNIDir, "manifold's multusCNIDir, where Multus's records are read (a host path, or \"none\"; default "+netconf.DefaultMultusCNIDir+"); in thick mode, the node daemon's --multus-cni-dir")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "manifold's logLevel: debug, verbose, warn, error")
	fs.StringVar(&o.LogFile, "log-file", o.LogFile, "manifold's logFile (a host path)")
	fs.BoolVar(&o.NamespaceIsolation, "namespace-isolation", o.NamespaceIsolation, "manifold's namespaceIsolation")
	fs.StringVar(&o.GlobalNamespaces, "global-namespaces", o.GlobalNamespaces, "manifold's globalNamespaces (comma-separated)")
	fs.StringVar(&o.MultusNamespace, "multus-namespace", o.MultusNamespace, "manifold's multusNamespace (the system namespace)")
	fs.StringVar(&o.ReadinessIndicatorFile, "readiness-indicator-file", o.ReadinessIndicatorFile, "manifold's readinessindicatorfile (a host path)")
	fs.Var(&o.SystemNamespaces, "system-namespaces", "manifold's systemNamespaces (comma-separated; empty for none)")
	fs.Var(&o.DefaultNetworks, "default-networks", "manifold's defaultNetworks (comma-separated)")
	fs.StringVar(&o.MultusDaemonConfig, "multus-daemon-config", o.MultusDaemonConfig, "taking over a node of a thick Multus: its daemon's ConfigMap (namespace/name), whose daemon-config.json holds its settings; empty: go without them")
	fs.StringVar(&o.AdditionalConfig, "additional-config", o.AdditionalConfig, "a JSON object merged into the generated plugin config last, e.g. '{\"retryDeleteOnError\":true}'")
}

// validate catches mistakes at start-up rather than after the first reconcile.
func (o *Options) validate() error {
	for flagName, v := range map[string]string{
		"cni-bin-dir": o.CNIBinDir, "cni-conf-dir": o.CNIConfDir,
		"host-cni-bin-dir": o.HostCNIBinDir, "host-cni-conf-dir": o.HostCNIConfDir,
		"token-file": o.TokenFile, "ca-file": o.CAFile,
	} {
		if v == "" {
			return fmt.Errorf("flag --%s must not be empty", flagName)
		}
	}
	if !filepath.IsAbs(o.HostCNIBinDir) || !filepath.IsAbs(o.HostCNIConfDir) {
		return errors.New("flags --host-cni-bin-dir and --host-cni-conf-dir must be absolute paths")
	}
	if o.ConfigName == "" || o.ConfigName != filepath.Base(o.ConfigName) || strings.HasPrefix(o.ConfigName, ".") {
		return fmt.Errorf("flag --config-name %q must be a plain file name", o.ConfigName)
	}
	switch filepath.Ext(o.ConfigName) {
	case ".conf", ".conflist", ".json":
	default:
		return fmt.Errorf("flag --config-name %q must end in .conf, .conflist or .json, or the runtime ignores it", o.ConfigName)
	}
	if o.ConfigFile != "" {
		switch filepath.Ext(o.ConfigFile) {
		case ".conf", ".conflist", ".json":
		default:
			return fmt.Errorf("flag --config-file %q must end in .conf, .conflist or .json", o.ConfigFile)
		}
	}
	if o.ConfigFile == "" && filepath.Ext(o.ConfigName) != ".conflist" {
		// The generated config is a conflist, and runtimes pick the parser by
		// the file's extension.
		return fmt.Errorf("flag --config-name %q must end in .conflist for a generated config", o.ConfigName)
	}
	if o.thick() {
		// The shim refuses a relative path, and Linux one that does not fit
		// in sun_path: either way every pod would go to the fallback binary.
		if !filepath.IsAbs(o.DaemonSocket) {
			return fmt.Errorf("flag --daemon-socket %q must be an absolute path", o.DaemonSocket)
		}
		if len(o.DaemonSocket) > maxSocketPath {
			return fmt.Errorf("flag --daemon-socket %q is longer than the %d bytes a unix socket path may have", o.DaemonSocket, maxSocketPath)
		}
	}
	if err := o.validateMultusDaemonRef(); err != nil {
		return err
	}
	if o.PollInterval <= 0 {
		return fmt.Errorf("flag --poll-interval %s must be positive", o.PollInterval)
	}
	if o.PrimaryWaitTimeout < 0 {
		return fmt.Errorf("flag --primary-wait-timeout %s must not be negative", o.PrimaryWaitTimeout)
	}
	if o.ConfigFile == "" {
		// A dry run with a stand-in primary catches a bad manifold key at
		// start-up (exit 2), not at every reconcile.
		if _, err := GenerateConfig(&Primary{Name: "primary.conflist", CNIVersion: "1.0.0"}, o); err != nil {
			return fmt.Errorf("check the manifold config flags: %w", err)
		}
	}
	return nil
}

// additional decodes --additional-config. Values stay raw JSON so that numbers
// and nested objects reach the config exactly as the admin wrote them.
func (o *Options) additional() (map[string]json.RawMessage, error) {
	if strings.TrimSpace(o.AdditionalConfig) == "" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(o.AdditionalConfig), &m); err != nil || m == nil {
		return nil, fmt.Errorf("flag --additional-config must be a JSON object: %q", o.AdditionalConfig)
	}
	if t, ok := m["type"]; ok && string(t) != strconv.Quote(o.pluginType()) {
		return nil, fmt.Errorf("flag --additional-config must not change \"type\" (got %s); --daemon-socket chooses between manifold and manifold-shim", t)
	}
	// The socket decides the type, so it is set by the flag only: a socket
	// here would be ignored in thin mode and would bypass the flag's checks
	// in thick mode.
	if _, ok := m["daemonSocket"]; ok {
		return nil, errors.New("flag --additional-config must not set \"daemonSocket\"; use --daemon-socket")
	}
	return m, nil
}

// thick reports whether the installer sets up thick mode: the runtime calls
// manifold-shim, which passes the call to the node daemon.
func (o *Options) thick() bool { return o.DaemonSocket != "" }

// daemonPaths are, in thick mode, the node paths of the daemon that serves
// the config, as the installer's flags describe it: the DaemonSet gives the
// daemon's flags the same values (deployments/daemonset-thick.yaml; checked
// by TestDaemonSetThick). The config the installer writes takes its node
// keys from these, and is held to the daemon's check of them (checkPlugin),
// so that it cannot name a path the daemon would refuse. nil in thin mode,
// where manifold obeys the config's paths.
func (o *Options) daemonPaths() *netconf.NodePaths {
	if !o.thick() {
		return nil
	}
	return &netconf.NodePaths{
		BinDir:             o.HostCNIBinDir,
		CNIDir:             cmp.Or(o.CNIDir, netconf.DefaultCNIDir),
		ConfDir:            cmp.Or(o.ConfDir, netconf.DefaultConfDir),
		Kubeconfig:         filepath.Join(o.hostCredDir(), kubeconfigName),
		LogFile:            o.LogFile,
		PodResourcesSocket: netconf.DefaultPodResourcesSocket,
		DeviceCheckpoint:   netconf.DefaultDeviceCheckpoint,
		DeviceInfoDir:      netconf.DefaultDeviceInfoDir,
		MultusCNIDir:       cmp.Or(o.MultusCNIDir, netconf.DefaultMultusCNIDir),
		MultusConfDir:      netconf.DefaultMultusConfDir,
	}
}

// pluginType is the generated config's "type": the binary the runtime runs.
func (o *Options) pluginType() string {
	if o.thick() {
		return shimBinaryName
	}
	return binaryName
}

// outputName is the file name of our config in the conf dir. A user-supplied
// file keeps its own extension, because the runtime chooses between the .conf
// and .conflist parsers by extension.
func (o *Options) outputName() string {
	if o.ConfigFile == "" {
		return o.ConfigName
	}
	return strings.TrimSuffix(o.ConfigName, filepath.Ext(o.ConfigName)) + filepath.Ext(o.ConfigFile)
}

// credDir is where the kubeconfig, token and CA go, as mounted here;
// hostCredDir is the same directory as the host sees it.
func (o *Options) credDir() string     { return filepath.Join(o.CNIConfDir, credDirName) }
func (o *Options) hostCredDir() string { return filepath.Join(o.HostCNIConfDir, credDirName) }

// listFlag is a comma-separated flag that remembers whether it was given, so
// that "--system-namespaces=" (no system namespaces) differs from leaving the
// key to manifold's default.
type listFlag struct {
	set    bool
	values []string
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.values, ",")
}

// Set implements flag.Value.
func (l *listFlag) Set(s string) error {
	l.set = true
	l.values = []string{}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.values = append(l.values, v)
		}
	}
	return nil
}
