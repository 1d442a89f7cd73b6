package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/netconf"
)

// multusConf is Multus's config as its thin DaemonSet writes it, with the keys
// manifold carries over and the ones it leaves.
const multusConf = `{
  "cniVersion": "0.4.0",
  "name": "multus-cni-network",
  "type": "multus",
  "capabilities": {"portMappings": true, "bandwidth": true},
  "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
  "cniDir": "/var/lib/cni/multus-custom",
  "binDir": "/opt/cni/bin",
  "logFile": "/var/log/multus.log",
  "logLevel": "verbose",
  "clusterNetwork": "/etc/cni/net.d/10-calico.conflist",
  "defaultNetworks": ["kube-system/extra"],
  "systemNamespaces": ["kube-system", "ops"],
  "multusNamespace": "multus",
  "namespaceIsolation": true,
  "globalNamespaces": "default,shared",
  "readinessindicatorfile": "/etc/cni/net.d/10-calico.conflist"
}`

// TestRunTakesOverFromMultus: on a node whose conf dir holds Multus's config,
// the installer carries Multus's keys over, moves its config out of the
// runtime's way, and a second run (a restart) does exactly the same.
func TestRunTakesOverFromMultus(t *testing.T) {
	n := newTestNode(t, true)
	n.writeConf(t, "10-calico.conflist", calicoConflist)
	n.writeConf(t, "00-multus.conf", multusConf)
	first := n.takeOverTwice(t, "00-multus.conf", func() {
		if err := logHas(n.logs, "took the node over from Multus"); err != nil {
			t.Error(err)
		}
	})
	version, p, err := decodeConflist(first)
	if err != nil {
		t.Fatal(err)
	}
	if version != "0.4.0" {
		t.Errorf("cniVersion %s, want Multus's 0.4.0", version)
	}
	want := map[string]any{
		"clusterNetwork":         "/etc/cni/net.d/10-calico.conflist",
		"defaultNetworks":        []any{"kube-system/extra"},
		"systemNamespaces":       []any{"kube-system", "ops"},
		"multusNamespace":        "multus",
		"namespaceIsolation":     true,
		"globalNamespaces":       "default,shared",
		"readinessindicatorfile": "/etc/cni/net.d/10-calico.conflist",
		"logLevel":               "verbose",
		"multusCNIDir":           "/var/lib/cni/multus-custom",
		// manifold's own, not Multus's:
		"kubeconfig": filepath.Join(n.o.hostCredDir(), kubeconfigName),
		"binDir":     n.o.HostCNIBinDir,
		"cniDir":     "/var/lib/cni/manifold",
	}
	for k, v := range want {
		if !reflect.DeepEqual(p[k], v) {
			t.Errorf("%s = %#v, want %#v", k, p[k], v)
		}
	}
	if _, ok := p["logFile"]; ok {
		t.Errorf("logFile carried over: %v", p["logFile"])
	}
	var caps []string
	for c := range p["capabilities"].(map[string]any) {
		caps = append(caps, c)
	}
	sort.Strings(caps)
	if !reflect.DeepEqual(caps, []string{"bandwidth", "io.kubernetes.cri.pod-annotations", "portMappings"}) {
		t.Errorf("capabilities %v", caps)
	}
	// The runtime loads only manifold's config and the primary now.
	var loadable []string
	des, _ := os.ReadDir(n.o.CNIConfDir)
	for _, de := range des {
		if !de.IsDir() && isConfigFile(de.Name()) {
			loadable = append(loadable, de.Name())
		}
	}
	if !reflect.DeepEqual(loadable, []string{DefaultConfigName, "10-calico.conflist"}) {
		t.Errorf("loadable configs %v", loadable)
	}
}

// TestRunTakesOverFromMultusDelegates: a Multus config whose default network
// is inline delegates (what Multus's own auto-config wrote in v3) and no
// other config in the conf dir.
func TestRunTakesOverFromMultusDelegates(t *testing.T) {
	n := newTestNode(t, true)
	n.writeConf(t, "00-multus.conflist", `{"cniVersion":"1.0.0","name":"multus-cni-network","plugins":[{"type":"multus","delegates":[{"cniVersion":"1.0.0","name":"br","type":"bridge"}]}]}`)
	n.start(t)
	eventually(t, "manifold's config uses Multus's delegates", func() error {
		_, p, err := n.plugin()
		if err != nil {
			return err
		}
		if p["delegates"] == nil || p["clusterNetwork"] != nil {
			return os.ErrInvalid
		}
		_, err = os.Stat(filepath.Join(n.o.CNIConfDir, "00-multus.conflist"+MultusDisabledSuffix))
		return err
	})
}

// TestRunTakesOverFromMultusThick: in thick mode, the config written on a
// node taken over from Multus must be one the node daemon serves. Multus's
// confDir and cniDir (a node path each: manifold's confDir and multusCNIDir)
// are not carried, since the daemon fixes them with its own flags and
// refuses a call whose config names others; the installer says so. The
// daemon here is the DaemonSet's (deployments/daemonset-thick.yaml: its
// --bin-dir, --cni-dir, --conf-dir and --kubeconfig, and the default
// --multus-cni-dir), and the check is its own (netconf.NodePaths.Apply).
// Before, the installer carried both keys, and the daemon answered every
// ADD, DEL and CHECK on the node with code 7.
func TestRunTakesOverFromMultusThick(t *testing.T) {
	daemon := func(n *testNode) *netconf.NodePaths {
		return &netconf.NodePaths{BinDir: n.o.HostCNIBinDir, CNIDir: "/var/lib/cni/manifold", ConfDir: "/etc/cni/manifold/net.d",
			Kubeconfig: filepath.Join(n.o.HostCNIConfDir, "manifold.d", "manifold.kubeconfig"), MultusCNIDir: netconf.DefaultMultusCNIDir}
	}
	served := func(t *testing.T, n *testNode, node *netconf.NodePaths) map[string]any {
		t.Helper()
		var p map[string]any
		var stdin []byte
		eventually(t, "manifold's config is written and Multus's moved", func() error {
			version, plugin, err := n.plugin()
			if err != nil {
				return err
			}
			p = plugin
			p["cniVersion"], p["name"] = version, DefaultNetworkName
			if stdin, err = json.Marshal(p); err != nil {
				return err
			}
			_, err = os.Stat(filepath.Join(n.o.CNIConfDir, "00-multus.conf"+MultusDisabledSuffix))
			return err
		})
		conf, err := netconf.ParseConfig(stdin)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Apply(stdin, conf); err != nil {
			t.Errorf("the node daemon refuses the config the installer wrote: %v", err)
		}
		return p
	}
	thick := func(t *testing.T) *testNode {
		n := newTestNode(t, true)
		n.o.DaemonSocket = "/run/manifold/manifold.sock"
		n.writeConf(t, "10-calico.conflist", calicoConflist)
		n.writeConf(t, "00-multus.conf", strings.Replace(multusConf, `"cniDir"`, `"confDir": "/etc/cni/multus/net.d", "cniDir"`, 1))
		return n
	}

	t.Run("the daemon's flags as shipped", func(t *testing.T) {
		n := thick(t)
		n.start(t)
		p := served(t, n, daemon(n))
		for _, k := range []string{"confDir", "multusCNIDir"} {
			if v, ok := p[k]; ok {
				t.Errorf("%s = %v: Multus's node path carried into a thick config", k, v)
			}
		}
		if p["clusterNetwork"] != "/etc/cni/net.d/10-calico.conflist" || p["multusNamespace"] != "multus" {
			t.Errorf("Multus's other keys not carried: %v", p)
		}
		eventually(t, "the installer says what it did not carry", func() error {
			return logHas(n.logs, "confDir=/etc/cni/multus/net.d (the daemon's --conf-dir is /etc/cni/manifold/net.d)")
		})
		if err := logHas(n.logs, "multusCNIDir=/var/lib/cni/multus-custom (the daemon's --multus-cni-dir is /var/lib/cni/multus)"); err != nil {
			t.Error(err)
		}
	})
	t.Run("the daemon given Multus's paths", func(t *testing.T) {
		n := thick(t)
		n.o.ConfDir, n.o.MultusCNIDir = "/etc/cni/multus/net.d", "/var/lib/cni/multus-custom"
		node := daemon(n)
		node.ConfDir, node.MultusCNIDir = n.o.ConfDir, n.o.MultusCNIDir
		n.start(t)
		p := served(t, n, node)
		if p["confDir"] != n.o.ConfDir || p["multusCNIDir"] != n.o.MultusCNIDir {
			t.Errorf("confDir %v, multusCNIDir %v; want the flags' %s and %s", p["confDir"], p["multusCNIDir"], n.o.ConfDir, n.o.MultusCNIDir)
		}
		if err := logHas(n.logs, "notCarried"); err == nil {
			t.Error("the installer warned about node paths that it did carry")
		}
	})
	t.Run("--additional-config with another node path", func(t *testing.T) {
		o := DefaultOptions()
		o.DaemonSocket = "/run/manifold/manifold.sock"
		o.AdditionalConfig = `{"confDir": "/etc/cni/elsewhere"}`
		err := o.validate()
		if err == nil || !strings.Contains(err.Error(), "node daemon") || !strings.Contains(err.Error(), "confDir") {
			t.Errorf("validate = %v, want an error saying the node daemon would refuse confDir", err)
		}
	})
}
