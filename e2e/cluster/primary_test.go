package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// A second primary, as another network plugin (Cilium, say) installs it: a
// bridge network of another name and subnet, under a name that sorts first.
const (
	otherPrimaryFile    = "05-cilium.conflist"
	otherPrimaryNetwork = "cilium-like"
	otherPrimaryBridge  = "cilium0"
)

func otherPrimaryConfig() string {
	return `{"cniVersion":"1.1.0","name":"` + otherPrimaryNetwork + `","plugins":[{"type":"bridge","bridge":"` + otherPrimaryBridge +
		`","isGateway":true,"ipam":{"type":"host-local","subnet":"10.244.1.0/24","routes":[{"dst":"0.0.0.0/0"}]}}]}`
}

// TestPrimaryChanges: the cluster's CNI rewrites its conflist, renames the
// others' configs out of the way (manifold's included) and writes its own,
// as Cilium does (multus-cni#972), and removes its config. The installer
// follows each change: manifold's config wraps the current primary, is
// written again when renamed away, is never empty and never nests manifold.
// While there is no primary, the node is NotReady through manifold's STATUS,
// with a message that names the missing file, the installer says why, and a
// pod that gets to the kubelet is refused with that message. On CRI-O, which
// asks STATUS only until its first success, the node stays Ready and the
// refusal is the ADD's.
func TestPrimaryChanges(t *testing.T) {
	e := newTenv(t)
	cluster.OwnNetwork(otherPrimaryNetwork, otherPrimaryBridge)
	e.install(cluster.Thin, imageV1)
	t.Cleanup(func() {
		os.Remove(filepath.Join(cluster.ConfDir, otherPrimaryFile))
		os.Remove(filepath.Join(cluster.ConfDir, cluster.PrimaryFile+".cilium_bak"))
		os.Remove(cluster.ManifoldConfig + ".cilium_bak")
		ensurePrimary()
	})
	guard := guardConfig()

	// 1. The primary is rewritten: it gains the tuning plugin, whose
	// capability manifold's config must now declare.
	var conf map[string]any
	if err := json.Unmarshal([]byte(cluster.PrimaryConfig()), &conf); err != nil {
		t.Fatal(err)
	}
	conf["plugins"] = append(conf["plugins"].([]any), map[string]any{"type": "tuning", "capabilities": map[string]bool{"mac": true}})
	rewritten, _ := json.MarshalIndent(conf, "", "  ")
	if err := cluster.WritePrimary(cluster.PrimaryFile, string(rewritten)); err != nil {
		t.Fatal(err)
	}
	e.waitPlugin("capabilities.mac", func(p map[string]any) bool {
		caps, _ := p["capabilities"].(map[string]any)
		return caps["mac"] == true
	})
	e.runOnePod(cluster.PrimaryNetwork)

	// 2. Another plugin takes over, Cilium's way: it renames every config
	// out of its way, manifold's included, and writes its own. Until the
	// installer has written manifold's config again, its absence is the
	// test's doing.
	guard.excuse("config unreadable")
	for _, f := range []string{cluster.PrimaryFile, filepath.Base(cluster.ManifoldConfig)} {
		p := filepath.Join(cluster.ConfDir, f)
		if err := os.Rename(p, p+".cilium_bak"); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.WritePrimary(otherPrimaryFile, otherPrimaryConfig()); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cluster.ConfDir, otherPrimaryFile)
	e.waitPlugin("clusterNetwork "+want, func(p map[string]any) bool { return p["clusterNetwork"] == want })
	guard.excuse("")
	e.wantNodeCNI(cluster.ManifoldNetwork)
	e.runOnePod(otherPrimaryNetwork)

	// 3. The primary is removed: manifold's config stays (the guard counts
	// every sample from here on), the node turns NotReady with manifold's
	// message, and a pod is refused with an event that names the missing
	// file until the primary is back; then it runs.
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	if e.c.Node.Kind() == cluster.CRIO {
		if ready, msg, err := e.c.NodeReady(e.ctx()); err != nil || !ready {
			t.Errorf("node Ready %v (%q, %v) on CRI-O without a primary, want it kept Ready (no STATUS after the first)", ready, msg, err)
		}
	} else {
		msg := e.waitReady(false)
		t.Logf("node NotReady: %s", msg)
		if !strings.Contains(msg, want) {
			t.Errorf("NotReady message %q does not name the missing primary %s", msg, want)
		}
	}
	// On CRI-O nothing above waited for the installer to see the change.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		logs := e.installerLogs(cluster.Thin)
		if strings.Contains(logs, "the primary CNI config is gone") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the installer does not say the primary is gone after a minute:\n%s", logs)
			break
		}
	}
	// The pod tolerates the NotReady node, so that it gets to the kubelet
	// and its sandbox is refused there, with manifold's message.
	spec := cluster.PodSpec(e.ns, testenv.UniqueName("noprimary-"), map[string]string{cluster.NetworksAnnotation: podNetworks})
	spec.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	p, err := e.c.Clientset().CoreV1().Pods(e.ns).Create(e.ctx(), spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused := e.waitRefused(p, want)
	t.Logf("pod %s refused: %s", p.Name, refused)
	if err := cluster.WritePrimary(otherPrimaryFile, otherPrimaryConfig()); err != nil {
		t.Fatal(err)
	}
	e.waitReady(true)
	e.podsRunning([]*corev1.Pod{p})
	if err := e.c.DeleteAndWait(e.ctx(), podWait, p); err != nil {
		t.Fatal(err)
	}

	if samples, bad := guard.finish(); len(bad) > 0 {
		t.Errorf("manifold's config went wrong (%d samples):\n  %s", samples, strings.Join(bad, "\n  "))
	}
	e.uninstall(cluster.Thin)
	os.Remove(want)
	os.Rename(filepath.Join(cluster.ConfDir, cluster.PrimaryFile+".cilium_bak"), filepath.Join(cluster.ConfDir, cluster.PrimaryFile))
	e.waitNoLeftovers()
}

// waitRefused waits until the kubelet says why the pod cannot start: an
// event that names missing, the primary CNI config that is gone (the
// runtime's network is not ready, with manifold's STATUS message, or the
// sandbox's ADD failed); and fails the test if the pod runs meanwhile.
func (e *tenv) waitRefused(p *corev1.Pod, missing string) string {
	e.t.Helper()
	deadline := time.Now().Add(podWait)
	for {
		if got := e.fresh(p); got.Status.Phase == corev1.PodRunning {
			e.t.Fatalf("pod %s runs while the node has no primary CNI", p.Name)
		}
		for _, ev := range e.c.Events(e.ctx(), p) {
			if (ev.Reason == "NetworkNotReady" || ev.Reason == "FailedCreatePodSandBox") && strings.Contains(ev.Message, missing) {
				return ev.Reason + ": " + ev.Message
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s: no event names the missing primary %s after %s; events: %v", p.Name, missing, podWait, e.c.EventMessages(e.ctx(), p))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPlugin waits until the plugin of manifold's config on the host
// satisfies ok.
func (e *tenv) waitPlugin(what string, ok func(map[string]any) bool) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var list struct{ Plugins []map[string]any }
		b, err := os.ReadFile(cluster.ManifoldConfig)
		if err == nil {
			err = json.Unmarshal(b, &list)
		}
		if err == nil && len(list.Plugins) == 1 && ok(list.Plugins[0]) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("manifold's config has no %s after a minute: %s (%v)", what, b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runOnePod runs a pod and checks its networks, its default network's name,
// then deletes it.
func (e *tenv) runOnePod(defaultNetwork string) {
	e.t.Helper()
	p, err := e.createPod("primary-")
	if err != nil {
		e.t.Fatal(err)
	}
	running := e.podsRunning([]*corev1.Pod{p})[0]
	st, err := cluster.NetworkStatus(e.fresh(running))
	if err != nil || len(st) == 0 || st[0].Name != defaultNetwork {
		e.t.Errorf("pod %s: network-status %s, want the default network %s first (%v)", p.Name, fmt.Sprint(st), defaultNetwork, err)
	}
	if err := e.c.DeleteAndWait(e.ctx(), podWait, running); err != nil {
		e.t.Fatal(err)
	}
}
