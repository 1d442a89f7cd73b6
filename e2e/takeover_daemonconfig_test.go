package e2e

// Taking a node of a thick Multus over (issue 33): its settings are in its
// daemon's ConfigMap, which the installer reads through the real API server
// as its ServiceAccount, with no more than deployments/rbac.yaml grants.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestTakeoverReadsMultusDaemonConfigMap: on a node whose 00-multus.conf is
// a thick Multus's shim config (as its daemon's "auto" mode writes it: the
// primary's path in the daemon's container, no settings), the thin
// DaemonSet's installer, with its own flags, volumes and a token of the
// manifold ServiceAccount, reads Multus's ConfigMap kube-system/
// multus-daemon-config and carries its settings into manifold's config. A
// pod attached through that config then gets Multus's defaultNetworks from
// Multus's multusNamespace, as under Multus. Before, the installer read the
// shim's file alone: the config named the primary by a path that is not the
// host's, and the pod got no default networks.
func TestTakeoverReadsMultusDaemonConfigMap(t *testing.T) {
	e := newEnv(t)
	n, o := e.deployedNode(t, "manifold")
	o.Binary, o.CNIDir = testenv.Manifold(t), e.cniDir
	if err := testenv.LinkPlugins(o.HostCNIBinDir, testenv.Plugins(t)); err != nil {
		t.Fatal(err)
	}
	e.writeFile(filepath.Join(o.HostCNIConfDir, "10-bridge.conflist"), e.bridgeConflist(clusterName, e.bridge, e.cluster))
	e.writeFile(filepath.Join(o.HostCNIConfDir, "00-multus.conf"), `{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus-shim",
		"capabilities":{"portMappings":true},"logLevel":"verbose","logToStderr":true,
		"clusterNetwork":"/host/etc/cni/net.d/10-bridge.conflist"}`)
	extra := nextSubnet()
	e.nad(e.sysNS, "extra", e.macvlanConf("", extra))

	daemonConfig := fmt.Sprintf(`{"chrootDir":"/hostroot","cniVersion":"1.0.0","logLevel":"verbose","logToStderr":true,
		"cniConfigDir":"/host/etc/cni/net.d","multusAutoconfigDir":"/host/etc/cni/net.d","multusConfigFile":"auto",
		"socketDir":"/host/run/multus/","multusNamespace":%q,"systemNamespaces":[%q],"defaultNetworks":["extra"],
		"namespaceIsolation":true,"globalNamespaces":%q}`, e.sysNS, e.sysNS, e.sysNS)
	cms := e.k8s.CoreV1().ConfigMaps(saNamespace)
	cm, err := cms.Create(e.ctx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "multus-daemon-config"},
		Data: map[string]string{"daemon-config.json": daemonConfig}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Multus's ConfigMap: %v", err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), cm.Name, metav1.DeleteOptions{}) })

	e.takeOver(t, n, o, "mftakeover-")
	copyPath := filepath.Join(o.HostCNIConfDir, "manifold.d", "multus-daemon-config.json")
	if got := string(mustRead(t, copyPath)); got != daemonConfig {
		t.Errorf("the installer's copy of Multus's daemon config holds %q, want the ConfigMap's %q", got, daemonConfig)
	}

	conf := runtimeConfig(t, o.HostCNIConfDir, o.ConfigName)
	var plugin map[string]any
	if err := json.Unmarshal(conf.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"clusterNetwork":     filepath.Join(o.HostCNIConfDir, "10-bridge.conflist"),
		"multusNamespace":    e.sysNS,
		"defaultNetworks":    []any{"extra"},
		"systemNamespaces":   []any{e.sysNS},
		"namespaceIsolation": true,
		"globalNamespaces":   e.sysNS,
		"logLevel":           "verbose",
		"confDir":            "/etc/cni/multus/net.d",
	} {
		if got, _ := json.Marshal(plugin[key]); string(got) != string(mustJSON(t, want)) {
			t.Errorf("config key %q = %s, want %s", key, got, mustJSON(t, want))
		}
	}
	for _, key := range []string{"chrootDir", "socketDir", "cniConfigDir", "multusAutoconfigDir", "multusConfigFile"} {
		if v, ok := plugin[key]; ok {
			t.Errorf("Multus's daemon key %s = %v carried into manifold's config", key, v)
		}
	}

	// A pod attached through that config gets Multus's default networks.
	e.rt = testenv.NewRuntime(t, o.HostCNIBinDir)
	pod := e.pod(e.ns, nil)
	box := e.sandboxFor(pod)
	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{e.clusterWant(), {name: e.sysNS + "/extra", ifname: "net1", subnet: extra}})
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
