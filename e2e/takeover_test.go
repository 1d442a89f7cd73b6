package e2e

// Taking a thick node over from Multus (issue 26), end to end on the runtime
// tier: deployments/daemonset-thick.yaml's installer, with its own flags,
// volumes and ServiceAccount token, takes over a Multus config that sets a
// confDir and a cniDir of its own; the daemon runs with the DaemonSet's
// flags; a real containerd calls manifold-shim for a pod's sandbox.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/install"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestThickTakeoverOfMultus: a pod starts, with its NAD, and is deleted,
// on a node whose Multus config set confDir /etc/cni/multus/net.d and
// cniDir /var/lib/cni/multus-custom, once manifold-install has taken it
// over in thick mode. Before, the installer carried both into manifold's
// config, the daemon (whose --conf-dir and --multus-cni-dir are its own)
// answered every call with code 7, and the pod never started.
//
// The node's dirs are under a temp root, and every path in the DaemonSet's
// flags is mapped into it. The daemon runs without --host-root: its
// delegates run in this machine's root, where the runtime's network
// namespaces and the plugins' state are, as the DaemonSet's --host-root
// gives them the host's.
func TestThickTakeoverOfMultus(t *testing.T) {
	bins := nodeBinaries(t)
	e := newEnv(t)
	n, o := e.deployedNode(t, "manifold-thick")
	o.Binary, o.ShimBinary = testenv.Manifold(t), testenv.Shim(t)
	o.DaemonSocket, o.CNIDir = n.host(o.DaemonSocket), n.host(o.CNIDir)
	if err := testenv.LinkPlugins(o.HostCNIBinDir, testenv.Plugins(t)); err != nil {
		t.Fatal(err)
	}

	// What Multus left: its config, with a confDir and a cniDir of its own,
	// and its default network inline.
	multusConfDir, multusCNIDir := n.host("/etc/cni/multus/net.d"), n.host("/var/lib/cni/multus-custom")
	for _, d := range []string{multusConfDir, multusCNIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.writeFile(filepath.Join(o.HostCNIConfDir, "00-multus.conf"), fmt.Sprintf(`{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus",
		"confDir":%q,"cniDir":%q,"kubeconfig":%q,"delegates":[%s]}`,
		multusConfDir, multusCNIDir, filepath.Join(o.HostCNIConfDir, "multus.d", "multus.kubeconfig"), e.bridgeConflist(clusterName, e.bridge, e.cluster)))
	sm := nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))

	e.takeOver(t, n, o, "mfthick-")
	runtimeConfig(t, o.HostCNIConfDir, o.ConfigName)

	// The daemon, as the DaemonSet runs it.
	daemonLog := &testenv.SyncBuffer{}
	d, err := testenv.RunDaemon(testenv.Manifold(t), o.DaemonSocket, daemonLog, n.daemonFlags(t)...)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped after containerd, whose Stop removes the sandboxes through it.
	t.Cleanup(func() {
		d.Stop(t)
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemonLog)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := crinode.Start(ctx, bins, crinode.Options{CNIBinDir: o.HostCNIBinDir, CNIConfDir: o.HostCNIConfDir, TempDir: t.TempDir(), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready, _, msg, err := node.NetworkReady(ctx)
		if err == nil && ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NetworkReady after 30s: %v %q %v", ready, msg, err)
		}
	}

	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv"})
	cfg := node.SandboxConfig(pod.Namespace, pod.Name, string(pod.UID), testenv.KubeletAnnotations(pod.Annotations, time.Now()))
	id, err := node.RunSandbox(ctx, cfg)
	if err != nil {
		t.Fatalf("RunPodSandbox on the node taken over from Multus: %v", err)
	}
	path, err := node.SandboxNetNS(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	netns, err := ns.GetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	got := linkNames(t, netns)
	netns.Close()
	if !slices.Contains(got, "eth0") || !slices.Contains(got, "net1") {
		t.Errorf("the sandbox's links = %v, want eth0 and net1", got)
	}
	if err := node.StopRemove(ctx, id); err != nil {
		t.Fatalf("delete the sandbox: %v", err)
	}
	if got := filesMentioning(t, e.leaseDir, id, true); len(got) != 0 {
		t.Errorf("host-local leases of the deleted sandbox: %v", got)
	}
	if got := filesMentioning(t, o.CNIDir, id, false); len(got) != 0 {
		t.Errorf("files of the deleted sandbox in cniDir: %v", got)
	}
	if strings.Contains(daemonLog.String(), "this node's daemon serves") {
		t.Errorf("the daemon refused a call for its node paths")
	}
}

// daemonFlags are the flags of the DaemonSet's daemon container, with every
// absolute path mapped to this node; without --socket (RunDaemon gives it)
// and --host-root (see TestThickTakeoverOfMultus).
func (n *node) daemonFlags(t *testing.T) []string {
	t.Helper()
	ds := n.ds
	var c *corev1.Container
	for i := range ds.Spec.Template.Spec.Containers {
		if ds.Spec.Template.Spec.Containers[i].Name == "daemon" {
			c = &ds.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil || len(c.Command) < 2 || c.Command[1] != "daemon" {
		t.Fatalf("DaemonSet %s has no container \"daemon\" running manifold daemon", ds.Name)
	}
	var flags []string
	for _, arg := range append(slices.Clone(c.Command[2:]), c.Args...) {
		name, value, ok := strings.Cut(arg, "=")
		if !ok {
			t.Fatalf("daemon flag %q: want --name=value", arg)
		}
		switch {
		case name == "--socket" || name == "--host-root":
			continue
		case filepath.IsAbs(value):
			value = n.host(value)
		}
		flags = append(flags, name+"="+value)
	}
	return flags
}

// takeOver runs the DaemonSet's installer on n, with options o, as a pod
// named prefix-… of the manifold ServiceAccount would (its token projected
// as the kubelet does), and waits until it has moved Multus's config out of
// the runtime's way. The installer runs until the test ends.
func (e *env) takeOver(t *testing.T, n *node, o *install.Options, prefix string) {
	t.Helper()
	installer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName(prefix), Namespace: saNamespace, Labels: n.ds.Spec.Template.Labels},
		Spec: *n.ds.Spec.Template.Spec.DeepCopy()}
	installer, err := e.k8s.CoreV1().Pods(saNamespace).Create(e.ctx(), installer, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create installer pod: %v", err)
	}
	t.Cleanup(func() {
		_ = e.k8s.CoreV1().Pods(saNamespace).Delete(context.Background(), installer.Name, metav1.DeleteOptions{})
	})
	ca, err := os.ReadFile(e.cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	n.project(mintToken(t, e.cp, installer, n.tokenExpiration()), ca)
	in := n.start(o)
	in.waitFor(t, "Multus's config moved out of the way", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(o.HostCNIConfDir, "00-multus.conf.disabled-by-manifold"))
		return err == nil
	})
}
