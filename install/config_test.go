package install

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/manifold-cni/manifold/netconf"
)

const (
	bridgeConf = `{"cniVersion":"0.4.0","name":"podnet","type":"bridge","bridge":"cni0",
		"capabilities":{"portMappings":true,"bandwidth":false},"ipam":{"type":"host-local","subnet":"10.1.0.0/16"}}`
	calicoConflist = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[
		{"type":"calico","ipam":{"type":"calico-ipam"}},
		{"type":"portmap","snat":true,"capabilities":{"portMappings":true}},
		{"type":"bandwidth","capabilities":{"bandwidth":true}},
		{"type":"tuning","capabilities":{"mac":false}}]}`
)

func TestFindPrimary(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string // primary file name; empty means ErrNoPrimary
		wantErr string // a parse error naming this
	}{
		{name: "empty dir"},
		{name: "single conf", files: map[string]string{"10-bridge.conf": bridgeConf}, want: "10-bridge.conf"},
		{
			name:  "alphabetically first wins",
			files: map[string]string{"20-bridge.conf": bridgeConf, "10-calico.conflist": calicoConflist},
			want:  "10-calico.conflist",
		},
		{
			name: "ours and manifold-named files are skipped",
			files: map[string]string{
				DefaultConfigName:    `{"cniVersion":"1.0.0","name":"m","plugins":[{"type":"manifold"}]}`,
				"05-manifold.conf":   bridgeConf,
				"10-calico.conflist": calicoConflist,
			},
			want: "10-calico.conflist",
		},
		{
			name: "meta-plugin configs are skipped by content",
			files: map[string]string{
				"00-multus.conf":    `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus"}`,
				"01-old.conflist":   `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"manifold"}]}`,
				"02-thick.conflist": `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"manifold-shim","daemonSocket":"/run/m.sock"}]}`,
				"10-bridge.conf":    bridgeConf,
			},
			want: "10-bridge.conf",
		},
		{
			name: "other extensions, dirs and temp files are ignored",
			files: map[string]string{
				"05-a.conf.bak":            bridgeConf,
				".05-b.conflist.tmp-123":   "{",
				"manifold.d/00-x.conflist": calicoConflist,
				"10-c.json":                bridgeConf,
			},
			want: "10-c.json",
		},
		{name: "only ours", files: map[string]string{DefaultConfigName: calicoConflist}},
		{
			name:    "a torn first candidate is an error, not skipped",
			files:   map[string]string{"05-half.conflist": `{"cniVersion":"1.0.0","plu`, "10-bridge.conf": bridgeConf},
			wantErr: "05-half.conflist",
		},
		{name: "no cniVersion", files: map[string]string{"10-x.conf": `{"type":"bridge"}`}, wantErr: "cniVersion"},
		{name: "conflist without plugins", files: map[string]string{"10-x.conflist": `{"cniVersion":"1.0.0"}`}, wantErr: "plugins"},
		{name: "conflist in a .conf", files: map[string]string{"10-x.conf": calicoConflist}, wantErr: "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := FindPrimary(dir, DefaultConfigName)
			switch {
			case tc.wantErr != "":
				if err == nil || errors.Is(err, ErrNoPrimary) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want an error naming %q", p, err, tc.wantErr)
				}
			case tc.want == "":
				if !errors.Is(err, ErrNoPrimary) {
					t.Fatalf("got %+v, %v; want ErrNoPrimary", p, err)
				}
			default:
				if err != nil || p.Name != tc.want {
					t.Fatalf("got %+v, %v; want %s", p, err, tc.want)
				}
			}
		})
	}
}

// generate finds the primary in a fresh conf dir and generates our config,
// with host paths equal to the test's paths so the result can be resolved.
func generate(t *testing.T, o *Options, name, primary string) (string, map[string]any) {
	t.Helper()
	dir := t.TempDir()
	o.CNIConfDir, o.HostCNIConfDir = dir, dir
	if err := os.WriteFile(filepath.Join(dir, name), []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := FindPrimary(dir, o.ConfigName)
	if err != nil {
		t.Fatal(err)
	}
	data, err := GenerateConfig(p, o)
	if err != nil {
		t.Fatal(err)
	}
	version, plugin, err := decodeConflist(data)
	if err != nil {
		t.Fatal(err)
	}
	// manifold itself must accept the plugin config as libcni hands it over
	// (name and cniVersion injected), and must be able to load the default
	// network it names.
	plugin["name"], plugin["cniVersion"] = DefaultNetworkName, version
	stdin, err := json.Marshal(plugin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconf.ParseConfig(stdin)
	if err != nil {
		t.Fatalf("manifold rejects the generated config %s: %v", stdin, err)
	}
	if _, err := netconf.LoadNetworkPath(cfg.ClusterNetwork); err != nil {
		t.Fatalf("manifold cannot load clusterNetwork %s: %v", cfg.ClusterNetwork, err)
	}
	return version, plugin
}

func TestGenerateConfigFromConf(t *testing.T) {
	o := DefaultOptions()
	version, plugin := generate(t, o, "10-bridge.conf", bridgeConf)
	if version != "0.4.0" {
		t.Errorf("cniVersion %q, want the primary's 0.4.0", version)
	}
	if want := bridgePlugin(o); !reflect.DeepEqual(plugin, want) {
		t.Errorf("plugin\n got %v\nwant %v", plugin, want)
	}
}

// bridgePlugin is the plugin generated in thin mode for bridgeConf as the
// primary, with o's default paths.
func bridgePlugin(o *Options) map[string]any {
	return map[string]any{
		"type":       "manifold",
		"name":       DefaultNetworkName,
		"cniVersion": "0.4.0",
		// bandwidth is declared false in the primary, so it is not a capability.
		"capabilities":   map[string]any{"portMappings": true, netconf.CapPodAnnotations: true},
		"clusterNetwork": filepath.Join(o.HostCNIConfDir, "10-bridge.conf"),
		"kubeconfig":     filepath.Join(o.HostCNIConfDir, "manifold.d", "manifold.kubeconfig"),
		"cniDir":         "/var/lib/cni/manifold",
		"binDir":         "/opt/cni/bin",
		"logLevel":       "error",
	}
}

// TestGenerateConfigThick: with --daemon-socket the plugin is manifold-shim
// with the socket, every other key as in thin mode, and the shim is installed
// by default.
func TestGenerateConfigThick(t *testing.T) {
	o, err := ParseFlags("test", []string{"--daemon-socket=/run/manifold/manifold.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if o.ShimBinary != DefaultShimBinary || o.Binary != DefaultOptions().Binary {
		t.Errorf("thick mode installs %q and %q, want the shim at %s and manifold, its fallback, at %s",
			o.ShimBinary, o.Binary, DefaultShimBinary, DefaultOptions().Binary)
	}
	_, plugin := generate(t, o, "10-bridge.conf", bridgeConf)
	want := bridgePlugin(o)
	want["type"], want["daemonSocket"] = "manifold-shim", "/run/manifold/manifold.sock"
	if !reflect.DeepEqual(plugin, want) {
		t.Errorf("plugin\n got %v\nwant %v", plugin, want)
	}
}

// TestShimBinaryFlag: the shim is installed by default in thick mode only,
// and --shim-binary overrides that either way.
func TestShimBinaryFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--daemon-socket=/run/m.sock"}, DefaultShimBinary},
		{[]string{"--daemon-socket=/run/m.sock", "--shim-binary="}, ""},
		{[]string{"--shim-binary=/opt/shim", "--daemon-socket=/run/m.sock"}, "/opt/shim"},
		{[]string{"--shim-binary=/opt/shim"}, "/opt/shim"},
	} {
		o, err := ParseFlags("test", tc.args)
		if err != nil {
			t.Errorf("ParseFlags(%q): %v", tc.args, err)
			continue
		}
		if o.ShimBinary != tc.want {
			t.Errorf("ParseFlags(%q): shim binary %q, want %q", tc.args, o.ShimBinary, tc.want)
		}
	}
}

func TestGenerateConfigFromConflist(t *testing.T) {
	o := DefaultOptions()
	version, plugin := generate(t, o, "10-calico.conflist", calicoConflist)
	if version != "1.0.0" {
		t.Errorf("cniVersion %q, want the primary's 1.0.0", version)
	}
	want := map[string]any{"portMappings": true, "bandwidth": true, netconf.CapPodAnnotations: true}
	if !reflect.DeepEqual(plugin["capabilities"], want) {
		t.Errorf("capabilities %v, want the union of the plugins' and the pod's annotations %v", plugin["capabilities"], want)
	}
	if plugin["clusterNetwork"] != filepath.Join(o.HostCNIConfDir, "10-calico.conflist") {
		t.Errorf("clusterNetwork %v", plugin["clusterNetwork"])
	}
}

// A primary that declares no capabilities: manifold's config still asks the
// runtime for the pod's annotations.
func TestGenerateConfigWithoutCapabilities(t *testing.T) {
	_, plugin := generate(t, DefaultOptions(), "10-ptp.conf", `{"cniVersion":"1.1.0","name":"p","type":"ptp"}`)
	if want := map[string]any{netconf.CapPodAnnotations: true}; !reflect.DeepEqual(plugin["capabilities"], want) {
		t.Errorf("capabilities %v, want only %v", plugin["capabilities"], want)
	}
}

// TestGenerateConfigFlags sets every manifold key by flag and checks that it
// reaches the plugin config, and that --additional-config wins.
func TestGenerateConfigFlags(t *testing.T) {
	o, err := ParseFlags("test", []string{
		"--cni-dir=/run/manifold",
		"--host-cni-bin-dir=/usr/libexec/cni",
		"--host-cni-conf-dir=/etc/kubernetes/cni/net.d",
		"--log-level=debug",
		"--log-file=/var/log/manifold.log",
		"--namespace-isolation",
		"--global-namespaces=default,shared",
		"--multus-namespace=manifold-system",
		"--readiness-indicator-file=/run/calico/ready",
		"--system-namespaces=",
		"--default-networks=kube-system/a, b",
		`--additional-config={"retryDeleteOnError":true,"logLevel":"warn","logOptions":{"maxSize":5}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	o.CNIConfDir = dir
	if err := os.WriteFile(filepath.Join(dir, "10-bridge.conf"), []byte(bridgeConf), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := FindPrimary(dir, o.ConfigName)
	if err != nil {
		t.Fatal(err)
	}
	data, err := GenerateConfig(p, o)
	if err != nil {
		t.Fatal(err)
	}
	_, plugin, err := decodeConflist(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type":                   "manifold",
		"capabilities":           map[string]any{"portMappings": true, netconf.CapPodAnnotations: true},
		"clusterNetwork":         "/etc/kubernetes/cni/net.d/10-bridge.conf",
		"kubeconfig":             "/etc/kubernetes/cni/net.d/manifold.d/manifold.kubeconfig",
		"cniDir":                 "/run/manifold",
		"binDir":                 "/usr/libexec/cni",
		"logLevel":               "warn",
		"logFile":                "/var/log/manifold.log",
		"namespaceIsolation":     true,
		"globalNamespaces":       "default,shared",
		"multusNamespace":        "manifold-system",
		"readinessindicatorfile": "/run/calico/ready",
		"systemNamespaces":       []any{},
		"defaultNetworks":        []any{"kube-system/a", "b"},
		"retryDeleteOnError":     true,
		"logOptions":             map[string]any{"maxSize": float64(5)},
	}
	if !reflect.DeepEqual(plugin, want) {
		t.Errorf("plugin\n got %v\nwant %v", plugin, want)
	}
	// The same inputs give the same bytes, or every poll would rewrite the file.
	again, err := GenerateConfig(p, o)
	if err != nil || string(again) != string(data) {
		t.Errorf("second generation differs: %v\n%s\n%s", err, data, again)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{
		{"--additional-config=[1,2]"},
		{"--additional-config={bad"},
		{`--additional-config={"type":"bridge"}`},
		{"--config-name=sub/00-manifold.conflist"},
		{"--config-name=.00-manifold.conflist"},
		{"--config-name=00-manifold.conf"},
		{"--config-name=00-manifold.txt", "--config-file=/etc/x.conf"},
		{"--config-file=/etc/x.yaml"},
		{"--host-cni-conf-dir=etc/cni/net.d"},
		{"--cni-conf-dir="},
		{"--poll-interval=0s"},
		{"--primary-wait-timeout=-1s"},
		{"stray"},
		{"--log-level=chatty"},
		{"--cni-dir=relative/dir"},
		{`--additional-config={"apiTimeout":"forever"}`},
		{`--additional-config={"clusterNetwork":""}`},
		{"--daemon-socket=run/manifold/manifold.sock"},
		{"--daemon-socket=/run/" + strings.Repeat("m", 100) + ".sock"},
		{`--additional-config={"daemonSocket":"/run/m.sock"}`},
		{"--daemon-socket=/run/m.sock", `--additional-config={"daemonSocket":"/run/other.sock"}`},
		{"--daemon-socket=/run/m.sock", `--additional-config={"type":"manifold"}`},
		{`--additional-config={"type":"manifold-shim"}`},
	} {
		if _, err := ParseFlags("test", args); err == nil {
			t.Errorf("ParseFlags(%q) succeeded, want an error", args)
		}
	}
	// The type may be restated, as long as it is the mode's own.
	for _, args := range [][]string{
		{`--additional-config={"type":"manifold"}`},
		{"--daemon-socket=/run/m.sock", `--additional-config={"type":"manifold-shim"}`},
	} {
		if _, err := ParseFlags("test", args); err != nil {
			t.Errorf("ParseFlags(%q): %v", args, err)
		}
	}
	o, err := ParseFlags("test", []string{"--config-file=/etc/custom/manifold.conf"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.outputName(); got != "00-manifold.conf" {
		t.Errorf("output name for a user .conf is %q, want 00-manifold.conf", got)
	}
}

// TestGenerateConfigRefusesWhatManifoldRefuses: installing a config that
// manifold rejects would fail every pod on the node.
func TestGenerateConfigRefusesWhatManifoldRefuses(t *testing.T) {
	_, err := GenerateConfig(&Primary{Name: "10-x.conf", CNIVersion: "9.9.9"}, DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "9.9.9") {
		t.Fatalf("a primary with cniVersion 9.9.9 gave %v, want an error naming the version", err)
	}
}

// TestFindPrimaryNeverTakesADirectory: a network's subdirectory chain (named
// after the network, which may end in .conf), a symlink to a directory with
// a config's name, and a FIFO are never taken for the primary, and never
// block the search; the file after them is.
func TestFindPrimaryNeverTakesADirectory(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"00-net.conf", "elsewhere.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "00-net.conf", "a.conf"), []byte(bridgeConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere.d"), filepath.Join(dir, "01-link.conflist")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "02-fifo.conflist"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-bridge.conf"), []byte(bridgeConf), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := FindPrimary(dir, DefaultConfigName)
	if err != nil || p.Name != "10-bridge.conf" {
		t.Fatalf("got %+v, %v; want 10-bridge.conf", p, err)
	}
}

// TestFindPrimaryChainCapabilities: the plugins that the runtime chains to a
// .conflist primary from its network's subdirectory declare capabilities
// that manifold must declare too; loadOnlyInlinedPlugins turns that off.
func TestFindPrimaryChainCapabilities(t *testing.T) {
	for _, tc := range []struct {
		inlined string
		want    map[string]bool
	}{
		{"", map[string]bool{"ips": true, "portMappings": true}},
		{`"loadOnlyInlinedPlugins":"True",`, map[string]bool{"ips": true}},
	} {
		dir := t.TempDir()
		primary := `{"cniVersion":"1.0.0","name":"podnet",` + tc.inlined + `"plugins":[{"type":"bridge","capabilities":{"ips":true}}]}`
		if err := os.WriteFile(filepath.Join(dir, "10-pod.conflist"), []byte(primary), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "podnet"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "podnet", "pm.conf"), []byte(`{"type":"portmap","capabilities":{"portMappings":true}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := FindPrimary(dir, DefaultConfigName)
		if err != nil || p.Name != "10-pod.conflist" || !reflect.DeepEqual(p.Capabilities, tc.want) {
			t.Errorf("%s: got %+v, %v; want capabilities %v", primary, p, err, tc.want)
		}
	}
}
