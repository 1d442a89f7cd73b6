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
	DefaultConfDir         = "/etc/cni/manifold/net.d"
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

	ClusterNetwork         string            `json:"clusterNetwork,omitempty"`
	DefaultNetworks        []string          `json:"defaultNetworks,omitempty"`
	Delegates              []json.RawMessage `json:"delegates,omitempty"`
	Kubeconfig             string            `json:"kubeconfig,omitempty"`
	ConfDir                string            `json:"confDir,omitempty"`
	CNIDir                 string            `json:"cniDir,omitempty"`
	BinDir                 string            `json:"binDir,omitempty"`
	LogFile                string            `json:"logFile,omitempty"`
	LogLevel               string            `json:"logLevel,omitempty"`
	LogToStderr            bool              `json:"logToStderr,omitempty"`
	LogOptions             *LogOptions       `json:"logOptions,omitempty"`
	NamespaceIsolation     bool              `json:"namespaceIsolation,omitempty"`
	RawGlobalNamespaces    string            `json:"globalNamespaces,omitempty"`
	SystemNamespaces       []string          `json:"systemNamespaces,omitempty"`
	MultusNamespace        string            `json:"multusNamespace,omitempty"`
	ReadinessIndicatorFile string            `json:"readinessindicatorfile,omitempty"`
	RetryDeleteOnError     bool              `json:"retryDeleteOnError,omitempty"`
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
	if len(stdin) > MaxConfigBytes {
		return nil, Invalid("invalid manifold config: %d bytes, more than the limit of %d", len(stdin), MaxConfigBytes)
	}
	c := &Config{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, Invalid("invalid manifold config: %s", describeJSONError(err))
	}
	if err := c.validate(); err != nil {
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

func (c *Config) validate() error {
	if c.CNIVersion == "" {
		return fmt.Errorf("key \"cniVersion\" is missing")
	}
	// Checked against the list, not by decoding a result: version.NewResult also
	// insists that the bytes carry the same cniVersion, so "{}" failed every version.
	if !slices.Contains(version.All.SupportedVersions(), c.CNIVersion) {
		return fmt.Errorf("key \"cniVersion\": unsupported version %q (want one of %s)", c.CNIVersion, strings.Join(version.All.SupportedVersions(), ", "))
	}
	if c.ClusterNetwork == "" && len(c.Delegates) == 0 {
		return fmt.Errorf("neither key \"clusterNetwork\" nor key \"delegates\" is set; one of them names the default network")
	}
	for i, n := range c.DefaultNetworks {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("key \"defaultNetworks\"[%d] is empty", i)
		}
	}
	if c.AuxiliaryCNIChainName != "" {
		if err := ValidateNetworkName(c.AuxiliaryCNIChainName); err != nil {
			return fmt.Errorf("key \"auxiliaryCNIChainName\": %w", err)
		}
	}
	setDefault(&c.ConfDir, DefaultConfDir)
	setDefault(&c.CNIDir, DefaultCNIDir)
	setDefault(&c.BinDir, DefaultBinDir)
	setDefault(&c.MultusCNIDir, DefaultMultusCNIDir)
	if c.MultusCNIDir != MultusCNIDirOff && !filepath.IsAbs(c.MultusCNIDir) {
		return fmt.Errorf("key \"multusCNIDir\": path %q is not absolute (\"none\" turns it off)", c.MultusCNIDir)
	}
	setDefault(&c.MultusNamespace, DefaultSystemNamespace)
	setDefault(&c.PodResourcesSocket, DefaultPodResourcesSocket)
	setDefault(&c.DeviceCheckpoint, DefaultDeviceCheckpoint)
	setDefault(&c.DeviceInfoDir, DefaultDeviceInfoDir)
	for key, p := range map[string]string{"confDir": c.ConfDir, "cniDir": c.CNIDir, "binDir": c.BinDir,
		"podResourcesSocket": c.PodResourcesSocket, "deviceCheckpoint": c.DeviceCheckpoint, "deviceInfoDir": c.DeviceInfoDir} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("key %q: path %q is not absolute", key, p)
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
		return fmt.Errorf("key \"logLevel\": %w", err)
	}
	if o := c.LogOptions; o != nil {
		for key, v := range map[string]*int{"maxAge": o.MaxAge, "maxSize": o.MaxSize, "maxBackups": o.MaxBackups} {
			if v != nil && *v < 0 {
				return fmt.Errorf("key \"logOptions.%s\": %d is negative", key, *v)
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
			return fmt.Errorf("key %q: %q is not a duration between 0s and 1h", d.key, d.raw)
		}
		*d.dst = v
	}
	if c.CallTimeout == 0 {
		return fmt.Errorf("key \"callTimeout\": %q would end every call at once; give a duration above 0s", c.RawCallTimeout)
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

// IsSystemNamespace reports whether pods in ns get no defaultNetworks and no status.
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
