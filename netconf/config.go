package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Defaults for the keys of DESIGN §2.
const (
	DefaultConfDir = "/etc/cni/manifold/net.d"
	// DefaultMultusConfDir is Multus's own default confDir, searched after
	// confDir (multusConfDir), so that the files Multus's docs tell users to
	// put there are found on a fresh install too.
	DefaultMultusConfDir = "/etc/cni/multus/net.d"
	// MultusConfDirOff, as "multusConfDir", searches confDir alone.
	MultusConfDirOff       = "none"
	DefaultCNIDir          = "/var/lib/cni/manifold"
	DefaultBinDir          = "/opt/cni/bin"
	DefaultSystemNamespace = "kube-system"
	DefaultGlobalNamespace = "default"
	// The kubelet's PodResources socket and device checkpoint, and the
	// Device Info spec's directory (docs/devices.md).
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultDeviceCheckpoint   = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
	DefaultDeviceInfoDir      = "/var/run/k8s.cni.cncf.io/devinfo"
	// DefaultMultusCNIDir is Multus's own default cniDir: where DEL, CHECK and
	// GC look for what Multus attached (docs/migration.md).
	DefaultMultusCNIDir = "/var/lib/cni/multus"
	// MultusCNIDirOff, as "multusCNIDir", turns the reading of Multus's
	// records off.
	MultusCNIDirOff = "none"
)

// Defaults for the time bounds that manifold adds (docs/configuration.md).
const (
	DefaultAPITimeout       = 10 * time.Second
	DefaultPodWaitTimeout   = 3 * time.Second
	DefaultReadinessTimeout = 45 * time.Second
	DefaultLockTimeout      = 60 * time.Second
	// DefaultCallTimeout stays under the kubelet's 2-minute runtime request
	// timeout, so that a call that hangs fails with manifold's own message,
	// and its rollback runs, before the runtime gives up on it.
	DefaultCallTimeout = 90 * time.Second
)

// LogOptions controls log-file rotation. Pointers tell "not set" from zero.
type LogOptions struct {
	MaxAge     *int  `json:"maxAge,omitempty"`
	MaxSize    *int  `json:"maxSize,omitempty"`
	MaxBackups *int  `json:"maxBackups,omitempty"`
	Compress   *bool `json:"compress,omitempty"`
}

// Config is manifold's own configuration, as read from stdin. Every key Multus
// accepts is here with the same JSON name and meaning.
type Config struct {
	types.PluginConf

	ClusterNetwork  string            `json:"clusterNetwork,omitempty"`
	DefaultNetworks []string          `json:"defaultNetworks,omitempty"`
	Delegates       []json.RawMessage `json:"delegates,omitempty"`
	Kubeconfig      string            `json:"kubeconfig,omitempty"`
	ConfDir         string            `json:"confDir,omitempty"`
	// MultusConfDir is searched after ConfDir, for the same lookups
	// (ConfDirs); "none" turns it off.
	MultusConfDir          string      `json:"multusConfDir,omitempty"`
	CNIDir                 string      `json:"cniDir,omitempty"`
	BinDir                 string      `json:"binDir,omitempty"`
	LogFile                string      `json:"logFile,omitempty"`
	LogLevel               string      `json:"logLevel,omitempty"`
	LogToStderr            bool        `json:"logToStderr,omitempty"`
	LogOptions             *LogOptions `json:"logOptions,omitempty"`
	NamespaceIsolation     bool        `json:"namespaceIsolation,omitempty"`
	RawGlobalNamespaces    string      `json:"globalNamespaces,omitempty"`
	SystemNamespaces       []string    `json:"systemNamespaces,omitempty"`
	MultusNamespace        string      `json:"multusNamespace,omitempty"`
	ReadinessIndicatorFile string      `json:"readinessindicatorfile,omitempty"`
	RetryDeleteOnError     bool        `json:"retryDeleteOnError,omitempty"`
	// Where a pod's devices come from, and where their Device Info files go
	// (docs/devices.md).
	PodResourcesSocket string `json:"podResourcesSocket,omitempty"`
	DeviceCheckpoint   string `json:"deviceCheckpoint,omitempty"`
	DeviceInfoDir      string `json:"deviceInfoDir,omitempty"`
	// AllowedPluginTypes, when set, lists the plugin and IPAM types that a
	// network from a NAD may use (docs/security.md); nil allows any type but
	// the meta-plugins.
	AllowedPluginTypes []string `json:"allowedPluginTypes,omitempty"`
	// RawPrestartDelegates is "prestartDelegates"; unset means true.
	RawPrestartDelegates *bool `json:"prestartDelegates,omitempty"`
	// ConcurrentAttachments attaches a pod's independent extra networks at
	// once instead of one after the other (docs/configuration.md).
	ConcurrentAttachments bool `json:"concurrentAttachments,omitempty"`
	// StrictCapabilities fails an attachment whose annotation asks for a
	// value (portMappings, bandwidth, infiniband-guid, deviceID) that no
	// plugin of its network declares the capability for; unset, the value is
	// left out with a warning, as under Multus (docs/configuration.md).
	StrictCapabilities bool `json:"strictCapabilities,omitempty"`
	// AuxiliaryCNIChainName names Multus's auxiliary chain: the plugin
	// configs in the directory of that name next to clusterNetwork's file,
	// run after every other attachment (AuxiliaryNetwork).
	AuxiliaryCNIChainName string `json:"auxiliaryCNIChainName,omitempty"`
	// MultusCNIDir is Multus's cniDir, read by DEL, CHECK and GC for the
	// containers that manifold has no record of (a node taken over from
	// Multus); "none" turns that off. MultusDir gives the effective value.
	MultusCNIDir string `json:"multusCNIDir,omitempty"`

	// RuntimeConfig carries the runtime's capability arguments (portMappings,
	// bandwidth, ...). They go to the default network only.
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
	// PodAnnotations are the pod's annotations as the runtime passed them in
	// runtimeConfig under CapPodAnnotations; nil when it passed none (an older
	// runtime, or the capability is not declared), never nil when it did.
	// PodAnnotationsErr says why a value could not be used: ADD fails with it,
	// and the other verbs, which do not need the annotations, ignore it.
	PodAnnotations    map[string]string `json:"-"`
	PodAnnotationsErr error             `json:"-"`

	// Keys that manifold adds; all are Go durations ("10s").
	RawAPITimeout       string `json:"apiTimeout,omitempty"`
	RawPodWaitTimeout   string `json:"podWaitTimeout,omitempty"`
	RawReadinessTimeout string `json:"readinessTimeout,omitempty"`
	RawLockTimeout      string `json:"lockTimeout,omitempty"`
	RawCallTimeout      string `json:"callTimeout,omitempty"`

	// Warnings are the config's problems that the call works around: an
	// unknown logLevel on every verb, and on DEL every problem that DEL can
	// do without (ParseConfigForDel). The call logs each one.
	Warnings []string `json:"-"`

	// Parsed forms, filled by ParseConfig.
	GlobalNamespaces []string      `json:"-"`
	APITimeout       time.Duration `json:"-"`
	PodWaitTimeout   time.Duration `json:"-"`
	ReadinessTimeout time.Duration `json:"-"`
	LockTimeout      time.Duration `json:"-"`
	CallTimeout      time.Duration `json:"-"`
}

// ParseConfig decodes and validates manifold's config and fills in defaults. Every
// error is a CNI error with code 7 that names the key at fault.
func ParseConfig(stdin []byte) (*Config, error) {
	return parseConfig(stdin, false)
}

// ParseConfigForDel is ParseConfig for DEL, which must not leave a pod's
// networks behind over a config problem it can do without: a key that DEL
// does not need, or one whose default serves it, is set to its default and
// the problem goes into Warnings. What DEL cannot work around is still an
// error: config that is not JSON, a cniVersion it cannot answer in, and
// allowedPluginTypes (a security setting is never loosened).
func ParseConfigForDel(stdin []byte) (*Config, error) {
	return parseConfig(stdin, true)
}

func parseConfig(stdin []byte, lenient bool) (*Config, error) {
	if len(stdin) > MaxConfigBytes {
		return nil, Invalid("invalid manifold config: %d bytes, more than the limit of %d", len(stdin), MaxConfigBytes)
	}
	c := &Config{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, Invalid("invalid manifold config: %s", describeJSONError(err))
	}
	if err := c.validate(lenient); err != nil {
		return nil, Invalid("invalid manifold config: %v", err)
	}
	return c, nil
}

// MultusDir is Multus's cniDir as DEL, CHECK and GC read it: "" when
// "multusCNIDir" is "none".
func (c *Config) MultusDir() string {
	if c.MultusCNIDir == MultusCNIDirOff {
		return ""
	}
	return c.MultusCNIDir
}

// PrestartDelegates reports whether a delegate's process may be started before
// its turn, and given its config when the turn comes (docs/performance.md).
func (c *Config) PrestartDelegates() bool {
	return c.RawPrestartDelegates == nil || *c.RawPrestartDelegates
}

// ConfDirs are the directories where networks named by name, and the
// networks of NADs with an empty spec.config, are looked up, in order:
// confDir, then multusConfDir unless it is off or the same directory.
func (c *Config) ConfDirs() []string {
	dirs := []string{c.ConfDir}
	if m := c.MultusConfDir; m != "" && m != MultusConfDirOff && !samePath(m, c.ConfDir) {
		dirs = append(dirs, m)
	}
	return dirs
}

// validate checks the config and fills in defaults. With lenient (DEL), a
// problem that DEL can do without is a warning, and the key takes its
// default.
func (c *Config) validate(lenient bool) error {
	soft := func(err error, reset func()) error {
		if !lenient {
			return err
		}
		c.Warnings = append(c.Warnings, err.Error()+"; DEL goes on without it")
		reset()
		return nil
	}
	return c.check(soft)
}

func (c *Config) check(soft func(err error, reset func()) error) error {
	if c.CNIVersion == "" {
		return fmt.Errorf("key \"cniVersion\" is missing")
	}
	// Checked against the list, not by decoding a result: version.NewResult also
	// insists that the bytes carry the same cniVersion, so "{}" failed every version.
	if !slices.Contains(version.All.SupportedVersions(), c.CNIVersion) {
		return fmt.Errorf("key \"cniVersion\": unsupported version %q (want one of %s)", c.CNIVersion, strings.Join(version.All.SupportedVersions(), ", "))
	}
	if c.ClusterNetwork == "" && len(c.Delegates) == 0 {
		// DEL reads the pod's networks from its record.
		if err := soft(fmt.Errorf("neither key \"clusterNetwork\" nor key \"delegates\" is set; one of them names the default network"), func() {}); err != nil {
			return err
		}
	}
	for i, n := range c.DefaultNetworks {
		if strings.TrimSpace(n) == "" {
			if err := soft(fmt.Errorf("key \"defaultNetworks\"[%d] is empty", i), func() {}); err != nil {
				return err
			}
		}
	}
	if c.AuxiliaryCNIChainName != "" {
		if err := ValidateNetworkName(c.AuxiliaryCNIChainName); err != nil {
			// DEL runs the chain its record kept.
			if err := soft(fmt.Errorf("key \"auxiliaryCNIChainName\": %w", err), func() { c.AuxiliaryCNIChainName = "" }); err != nil {
				return err
			}
		}
	}
	setDefault(&c.ConfDir, DefaultConfDir)
	setDefault(&c.MultusConfDir, DefaultMultusConfDir)
	setDefault(&c.CNIDir, DefaultCNIDir)
	setDefault(&c.BinDir, DefaultBinDir)
	setDefault(&c.MultusCNIDir, DefaultMultusCNIDir)
	if c.MultusCNIDir != MultusCNIDirOff && !filepath.IsAbs(c.MultusCNIDir) {
		if err := soft(fmt.Errorf("key \"multusCNIDir\": path %q is not absolute (\"none\" turns it off)", c.MultusCNIDir), func() { c.MultusCNIDir = DefaultMultusCNIDir }); err != nil {
			return err
		}
	}
	if c.MultusConfDir != MultusConfDirOff && !filepath.IsAbs(c.MultusConfDir) {
		if err := soft(fmt.Errorf("key \"multusConfDir\": path %q is not absolute (\"none\" turns it off)", c.MultusConfDir), func() { c.MultusConfDir = DefaultMultusConfDir }); err != nil {
			return err
		}
	}
	setDefault(&c.MultusNamespace, DefaultSystemNamespace)
	setDefault(&c.PodResourcesSocket, DefaultPodResourcesSocket)
	setDefault(&c.DeviceCheckpoint, DefaultDeviceCheckpoint)
	setDefault(&c.DeviceInfoDir, DefaultDeviceInfoDir)
	paths := []struct {
		key string
		p   *string
		def string
	}{
		{"confDir", &c.ConfDir, DefaultConfDir}, {"cniDir", &c.CNIDir, DefaultCNIDir}, {"binDir", &c.BinDir, DefaultBinDir},
		{"podResourcesSocket", &c.PodResourcesSocket, DefaultPodResourcesSocket},
		{"deviceCheckpoint", &c.DeviceCheckpoint, DefaultDeviceCheckpoint}, {"deviceInfoDir", &c.DeviceInfoDir, DefaultDeviceInfoDir},
	}
	for _, k := range paths {
		if !filepath.IsAbs(*k.p) {
			// A node path that is not absolute never worked: the records
			// and files, if any, are where the default puts them.
			if err := soft(fmt.Errorf("key %q: path %q is not absolute", k.key, *k.p), func() { *k.p = k.def }); err != nil {
				return err
			}
		}
	}
	if c.SystemNamespaces == nil {
		c.SystemNamespaces = []string{DefaultSystemNamespace}
	}
	c.GlobalNamespaces = []string{DefaultGlobalNamespace}
	if c.RawGlobalNamespaces != "" {
		c.GlobalNamespaces = nil
		for _, ns := range strings.Split(c.RawGlobalNamespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				c.GlobalNamespaces = append(c.GlobalNamespaces, ns)
			}
		}
	}
	if err := validateAllowedTypes(c.AllowedPluginTypes); err != nil {
		return err
	}
	if err := c.parsePodAnnotations(); err != nil {
		c.PodAnnotationsErr = Invalid("invalid runtime config: %v", err)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		// As under Multus, which keeps its default level: a typo in the
		// level must not stop the node's pods (docs/configuration.md).
		c.Warnings = append(c.Warnings, fmt.Sprintf("key \"logLevel\": %v; logging at %q", err, "error"))
		c.LogLevel = ""
	}
	if o := c.LogOptions; o != nil {
		for key, v := range map[string]*int{"maxAge": o.MaxAge, "maxSize": o.MaxSize, "maxBackups": o.MaxBackups} {
			if v != nil && *v < 0 {
				if err := soft(fmt.Errorf("key \"logOptions.%s\": %d is negative", key, *v), func() { c.LogOptions = nil }); err != nil {
					return err
				}
				break
			}
		}
	}
	durations := []struct {
		key string
		raw string
		def time.Duration
		dst *time.Duration
	}{
		{"apiTimeout", c.RawAPITimeout, DefaultAPITimeout, &c.APITimeout},
		{"podWaitTimeout", c.RawPodWaitTimeout, DefaultPodWaitTimeout, &c.PodWaitTimeout},
		{"readinessTimeout", c.RawReadinessTimeout, DefaultReadinessTimeout, &c.ReadinessTimeout},
		{"lockTimeout", c.RawLockTimeout, DefaultLockTimeout, &c.LockTimeout},
		{"callTimeout", c.RawCallTimeout, DefaultCallTimeout, &c.CallTimeout},
	}
	for _, d := range durations {
		*d.dst = d.def
		if d.raw == "" {
			continue
		}
		v, err := time.ParseDuration(d.raw)
		if err != nil || v < 0 || v > time.Hour {
			if err := soft(fmt.Errorf("key %q: %q is not a duration between 0s and 1h", d.key, d.raw), func() {}); err != nil {
				return err
			}
			continue
		}
		*d.dst = v
	}
	if c.CallTimeout == 0 {
		if err := soft(fmt.Errorf("key \"callTimeout\": %q would end every call at once; give a duration above 0s", c.RawCallTimeout), func() { c.CallTimeout = DefaultCallTimeout }); err != nil {
			return err
		}
	}
	return nil
}

// CapPodAnnotations is the capability under which containerd and CRI-O pass
// a pod's annotations, as the kubelet gave them for the sandbox, in
// runtimeConfig. manifold's config declares it (manifold-install writes it), so
// that ADD need not read the pod from the API server (docs/kubernetes.md).
const CapPodAnnotations = "io.kubernetes.cri.pod-annotations"

// parsePodAnnotations takes the pod's annotations out of runtimeConfig. A null
// value counts as none passed; anything but an object of strings is an error.
func (c *Config) parsePodAnnotations() error {
	raw, ok := c.RuntimeConfig[CapPodAnnotations]
	if !ok || raw == nil {
		return nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("key \"runtimeConfig.%s\" must be an object of strings, got %s", CapPodAnnotations, jsonKind(raw))
	}
	annotations := make(map[string]string, len(obj))
	for k, v := range obj {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("key \"runtimeConfig.%s\": annotation %q must be a string, got %s", CapPodAnnotations, k, jsonKind(v))
		}
		annotations[k] = s
	}
	c.PodAnnotations = annotations
	return nil
}

// jsonKind names the JSON type of a value that encoding/json decoded into any.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

// IsSystemNamespace reports whether pods in ns get no defaultNetworks.
func (c *Config) IsSystemNamespace(ns string) bool {
	for _, s := range c.SystemNamespaces {
		if s == ns {
			return true
		}
	}
	return false
}

// IsGlobalNamespace reports whether NADs in ns may be used from any namespace
// under namespaceIsolation.
func (c *Config) IsGlobalNamespace(ns string) bool {
	for _, s := range c.GlobalNamespaces {
		if s == ns {
			return true
		}
	}
	return false
}

func setDefault(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

// describeJSONError turns a decode error into a message that names the key.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("key %q must be %s, got JSON %s", te.Field, te.Type.String(), te.Value)
	}
	return err.Error()
}
