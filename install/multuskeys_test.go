package install

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// thinEntrypointConf is 00-multus.conf as Multus v4.3.0's thin DaemonSet
// (thin_entrypoint) writes it with its default flags: no confDir (it writes
// its --multus-cni-conf-dir as "cniConf", a key no Multus code reads), no
// logToStderr (true unless told otherwise), the primary inline.
const thinEntrypointConf = `{
  "cniVersion": "1.0.0",
  "name": "multus-cni-network",
  "type": "multus",
  "capabilities": {"portMappings": true},
  "cniConf": "/host/etc/cni/multus/net.d",
  "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
  "delegates": [{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap","capabilities":{"portMappings":true}}]}]
}`

// TestTakeoverCarriesMultusDefaults: where Multus's config leaves a key out
// and Multus's default differs from manifold's, manifold's config gets
// Multus's: confDir (a NAD with an empty spec.config named a file in
// /etc/cni/multus/net.d), logToStderr, and the log rotation. Before, the
// installer carried only the keys the file set, so such a NAD stopped
// resolving after the takeover.
func TestTakeoverCarriesMultusDefaults(t *testing.T) {
	n := newTestNode(t, true)
	n.writeConf(t, "00-multus.conf", thinEntrypointConf)
	n.start(t)
	var p map[string]any
	eventually(t, "manifold's config is written", func() (err error) { _, p, err = n.plugin(); return err })
	want := map[string]any{
		"confDir":     "/etc/cni/multus/net.d",
		"logToStderr": true,
		"logOptions":  map[string]any{"maxAge": 5.0, "maxSize": 100.0, "maxBackups": 5.0, "compress": true},
	}
	for k, v := range want {
		if !reflect.DeepEqual(p[k], v) {
			t.Errorf("%s = %#v, want Multus's default %#v", k, p[k], v)
		}
	}
	// Multus's default cniDir is manifold's default multusCNIDir: nothing to carry.
	for _, k := range []string{"multusCNIDir", "cniConf"} {
		if v, ok := p[k]; ok {
			t.Errorf("%s = %v, want it left out", k, v)
		}
	}
	eventually(t, "the log names each key", func() error {
		for _, line := range []string{
			`carried a key of Multus's config" key=confDir value="\"/etc/cni/multus/net.d\"" from="Multus's default" as=confDir`,
			`carried a key of Multus's config" key=delegates`,
			`dropped a key of Multus's config" key=cniConf value="\"/host/etc/cni/multus/net.d\"" from=00-multus.conf reason="Multus v4.3.0 does not read it"`,
			`dropped a key of Multus's config" key=kubeconfig`,
		} {
			if err := logHas(n.logs, line); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestTakeoverMultusLogOptions: the rotation Multus fills in around the
// logOptions a config sets is what manifold gets.
func TestTakeoverMultusLogOptions(t *testing.T) {
	m, ok := parseMultus("00-multus.conf", []byte(`{"cniVersion":"1.0.0","type":"multus","clusterNetwork":"c","logOptions":{"maxAge":1,"compress":false}}`))
	if !ok {
		t.Fatal("not taken for Multus's config")
	}
	m.resolve(DefaultOptions())
	want := map[string]any{"maxAge": 1.0, "maxSize": 100, "maxBackups": 5, "compress": false}
	if got := m.keys["logOptions"]; !reflect.DeepEqual(got, want) {
		t.Errorf("logOptions = %#v, want %#v", got, want)
	}
}

// multusShimConf is 00-multus.conf as a thick Multus v4.3.0 daemon in
// "auto" mode writes it: its clusterNetwork is the primary's path in the
// daemon's container, and the settings are in the daemon's ConfigMap.
const multusShimConf = `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim",
  "capabilities":{"portMappings":true},"logLevel":"verbose","logToStderr":true,
  "clusterNetwork":"/host/etc/cni/net.d/10-calico.conflist"}`

// multusDaemonJSON is the daemon's daemon-config.json: Multus's own example
// with the settings a cluster adds.
const multusDaemonJSON = `{
  "chrootDir": "/hostroot",
  "cniVersion": "0.3.1",
  "logLevel": "verbose",
  "logToStderr": true,
  "cniConfigDir": "/host/etc/cni/net.d",
  "multusAutoconfigDir": "/host/etc/cni/net.d",
  "multusConfigFile": "auto",
  "socketDir": "/host/run/multus/",
  "defaultNetworks": ["kube-system/extra"],
  "namespaceIsolation": true,
  "globalNamespaces": "default,shared",
  "multusNamespace": "multus",
  "systemNamespaces": ["kube-system", "ops"],
  "readinessindicatorfile": "/host/run/calico/ready",
  "retryDeleteOnError": true,
  "metricsPort": 9091
}`

func multusDaemonConfigMap(data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "multus-daemon-config"},
		Data: map[string]string{"daemon-config.json": data}}
}

// TestTakeoverOfThickMultus: a node of a thick Multus is taken over with
// the settings in its daemon's ConfigMap, read through the API, as from a
// thin config; the paths in the daemon's container are the host's in
// manifold's config. A restart with the ConfigMap gone (deleted after the
// migration) writes the same config from the copy kept on the node; with
// neither, the installer does not take the node over, and says why. Before,
// the installer read only the shim's file: clusterNetwork named a path in
// Multus's container, and every other setting was lost.
func TestTakeoverOfThickMultus(t *testing.T) {
	n := newTestNode(t, true)
	n.writeConf(t, "10-calico.conflist", calicoConflist)
	n.writeConf(t, "00-multus.conf", multusShimConf)
	client := kubernetes.Interface(fake.NewClientset(multusDaemonConfigMap(multusDaemonJSON)))
	n.o.MultusDaemonConfig = DefaultMultusDaemonConfig
	n.o.newClient = func() (kubernetes.Interface, error) { return client, nil }
	first := n.takeOverTwice(t, "00-multus.conf", func() {
		// The ConfigMap is deleted once every node is done.
		client = fake.NewClientset()
	})
	version, p, err := decodeConflist(first)
	if err != nil {
		t.Fatal(err)
	}
	if version != "0.3.1" {
		t.Errorf("cniVersion %s, want the shim file's 0.3.1", version)
	}
	want := map[string]any{
		"clusterNetwork":         filepath.Join(n.o.HostCNIConfDir, "10-calico.conflist"),
		"defaultNetworks":        []any{"kube-system/extra"},
		"namespaceIsolation":     true,
		"globalNamespaces":       "default,shared",
		"multusNamespace":        "multus",
		"systemNamespaces":       []any{"kube-system", "ops"},
		"readinessindicatorfile": "/run/calico/ready",
		"retryDeleteOnError":     true,
		"logLevel":               "verbose",
		"confDir":                "/etc/cni/multus/net.d",
	}
	for k, v := range want {
		if !reflect.DeepEqual(p[k], v) {
			t.Errorf("%s = %#v, want %#v", k, p[k], v)
		}
	}
	for _, k := range []string{"chrootDir", "socketDir", "cniConfigDir", "multusAutoconfigDir", "multusConfigFile", "metricsPort"} {
		if v, ok := p[k]; ok {
			t.Errorf("the daemon's own %s = %v carried", k, v)
		}
	}
	for _, line := range []string{
		`read the thick Multus daemon's config" from="ConfigMap kube-system/multus-daemon-config"`,
		`carried a key of Multus's config" key=defaultNetworks value="[\"kube-system/extra\"]" from="ConfigMap kube-system/multus-daemon-config" as=defaultNetworks`,
		`key=clusterNetwork value="\"` + filepath.Join(n.o.HostCNIConfDir, "10-calico.conflist") + `\"" from=00-multus.conf as=clusterNetwork note="a path in Multus's daemon container, /host/etc/cni/net.d/10-calico.conflist`,
		`dropped a key of Multus's config" key=chrootDir value="\"/hostroot\"" from="ConfigMap kube-system/multus-daemon-config" reason="the node daemon's --host-root"`,
		`cannot read the thick Multus daemon's config; using the copy kept when it was read`,
	} {
		if err := logHas(n.logs, line); err != nil {
			t.Error(err)
		}
	}

	t.Run("neither the ConfigMap nor a copy", func(t *testing.T) {
		n := newTestNode(t, true)
		n.writeConf(t, "10-calico.conflist", calicoConflist)
		n.writeConf(t, "00-multus.conf", multusShimConf)
		n.o.MultusDaemonConfig = DefaultMultusDaemonConfig
		n.o.newClient = func() (kubernetes.Interface, error) { return fake.NewClientset(), nil }
		n.start(t)
		eventually(t, "the installer says why it waits", func() error {
			return logHas(n.logs, "give --multus-daemon-config= to take the node over without them")
		})
		if _, err := os.Stat(n.confOut); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("manifold's config was written without Multus's settings: %v", err)
		}
		if _, err := os.Stat(filepath.Join(n.o.CNIConfDir, "00-multus.conf")); err != nil {
			t.Errorf("Multus's config was moved: %v", err)
		}
	})
	t.Run("--multus-daemon-config= goes without", func(t *testing.T) {
		n := newTestNode(t, true)
		n.writeConf(t, "10-calico.conflist", calicoConflist)
		n.writeConf(t, "00-multus.conf", multusShimConf)
		n.o.MultusDaemonConfig = ""
		n.o.newClient = func() (kubernetes.Interface, error) { return nil, errors.New("no API server in this test") }
		n.start(t)
		n.wantClusterNetwork(t, "10-calico.conflist", "0.3.1")
	})
}

// TestTakeoverOfThickMultusWithoutItsFile: Multus's thick daemon removes
// its shim config when it stops, so a node it leaves for manifold may have
// none; its daemon's ConfigMap still holds the node's settings, and the
// installer carries them, with the primary it finds, as Multus's "auto"
// mode found it. On a cluster without that ConfigMap the installer asks
// once and installs as usual.
func TestTakeoverOfThickMultusWithoutItsFile(t *testing.T) {
	n := newTestNode(t, true)
	n.writeConf(t, "10-calico.conflist", calicoConflist)
	n.o.MultusDaemonConfig = DefaultMultusDaemonConfig
	client := fake.NewClientset(multusDaemonConfigMap(multusDaemonJSON))
	n.o.newClient = func() (kubernetes.Interface, error) { return client, nil }
	n.start(t)
	n.wantClusterNetwork(t, "10-calico.conflist", "1.0.0")
	_, p, err := n.plugin()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"multusNamespace": "multus", "namespaceIsolation": true, "defaultNetworks": []any{"kube-system/extra"}} {
		if !reflect.DeepEqual(p[k], v) {
			t.Errorf("%s = %#v, want the ConfigMap's %#v", k, p[k], v)
		}
	}

	t.Run("no Multus at all", func(t *testing.T) {
		n := newTestNode(t, false)
		n.writeConf(t, "10-calico.conflist", calicoConflist)
		n.o.MultusDaemonConfig = DefaultMultusDaemonConfig
		client := fake.NewClientset()
		n.o.newClient = func() (kubernetes.Interface, error) { return client, nil }
		n.start(t)
		n.wantClusterNetwork(t, "10-calico.conflist", "1.0.0")
		if err := logHas(n.logs, "no thick Multus daemon's config to carry over"); err != nil {
			t.Error(err)
		}
		// More reconciles: each rewrites a config that was removed.
		for i := 0; i < 3; i++ {
			if err := os.Remove(n.confOut); err != nil {
				t.Fatal(err)
			}
			eventually(t, "manifold's config is written again", func() error { _, err := os.Stat(n.confOut); return err })
		}
		_, p, err := n.plugin()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p["confDir"]; ok {
			t.Errorf("confDir = %v on a node that never ran Multus", p["confDir"])
		}
		gets := 0
		for _, a := range client.Actions() {
			if a.GetResource().Resource == "configmaps" {
				gets++
			}
		}
		if gets != 1 {
			t.Errorf("the installer asked for Multus's ConfigMap %d times, want once", gets)
		}
	})
}

// TestTakeoverThickManifoldKeepsDaemonPaths: a thick manifold's node paths
// are its daemon's flags, so Multus's default confDir is not carried there;
// the installer warns that it differs.
func TestTakeoverThickManifoldKeepsDaemonPaths(t *testing.T) {
	n := newTestNode(t, true)
	n.o.DaemonSocket = "/run/manifold/manifold.sock"
	n.writeConf(t, "00-multus.conf", thinEntrypointConf)
	n.start(t)
	var p map[string]any
	eventually(t, "manifold's config is written", func() (err error) { _, p, err = n.plugin(); return err })
	if v, ok := p["confDir"]; ok {
		t.Errorf("confDir = %v in a thick config", v)
	}
	eventually(t, "the warning", func() error {
		return logHas(n.logs, "confDir=/etc/cni/multus/net.d (the daemon's --conf-dir is /etc/cni/manifold/net.d)")
	})
}

// TestMultusDaemonConfigFlag: --multus-daemon-config is namespace/name, or
// empty.
func TestMultusDaemonConfigFlag(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"kube-system/multus-daemon-config", true},
		{"", true},
		{"multus-daemon-config", false},
		{"kube-system/", false},
		{"/multus-daemon-config", false},
		{"Kube_System/x", false},
	} {
		_, err := ParseFlags("manifold-install", []string{"--multus-daemon-config=" + tc.value})
		if (err == nil) != tc.ok {
			t.Errorf("--multus-daemon-config=%q: %v, want ok=%v", tc.value, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--multus-daemon-config") {
			t.Errorf("--multus-daemon-config=%q: %v does not name the flag", tc.value, err)
		}
	}
}

// TestMigrationDocListsEveryMultusKey: docs/migration.md's table of what
// becomes of Multus's keys has a row for each key the installer knows, and
// none that it does not know (it would drop that key as one Multus does not
// read).
func TestMigrationDocListsEveryMultusKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "## What becomes of each of Multus's keys")
	if !ok {
		t.Fatal("docs/migration.md has no section \"What becomes of each of Multus's keys\"")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	doc := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if key, ok := strings.CutPrefix(line, "| `"); ok {
			key, _, _ = strings.Cut(key, "`")
			doc[key] = true
		}
	}
	for key := range multusKeyRules {
		if !doc[key] {
			t.Errorf("docs/migration.md does not say what becomes of %q", key)
		}
	}
	for key := range doc {
		if _, ok := multusKeyRules[key]; !ok {
			t.Errorf("docs/migration.md lists %q, which the installer does not know", key)
		}
	}
}
