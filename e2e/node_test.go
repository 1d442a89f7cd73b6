package e2e

// A real node (issues 23 and 35): a kubelet joins the package's cluster plane
// (kube-scheduler, kube-controller-manager, ServiceAccount admission) on the
// runtime tier's containerd, and again on its CRI-O, and the tests make pods
// with client-go as a user does. Their pods name the node; a DaemonSet's pod
// is bound by the scheduler. In daemon mode the daemon runs as a process
// beside the kubelet.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// nodeWait bounds each wait for the kubelet: a pod to run or go, the node's
// Ready condition to change. The kubelet acts within seconds; this is a
// did-not-hang bound.
const nodeWait = 2 * time.Minute

func TestNodeThin(t *testing.T)   { nodeKinds(t, false) }
func TestNodeDaemon(t *testing.T) { nodeKinds(t, true) }

// nodeKinds runs the node's cases on containerd, then on CRI-O.
func nodeKinds(t *testing.T, daemon bool) {
	for _, kind := range []string{containerdKind, crioKind} {
		t.Run(kind, func(t *testing.T) { nodeCases(t, kind, daemon) })
	}
}

// kubeNode is a criEnv with a kubelet.
type kubeNode struct {
	*criEnv
	name    string
	kubelet *crinode.Kubelet
}

func newKubeNode(t *testing.T, kind string, daemon bool) *kubeNode {
	t.Helper()
	bins := nodeBinaries(t)
	if bins.Kubelet == "" {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("no kubelet: set MANIFOLD_KUBELET (make test does) or unset MANIFOLD_CONTAINERD_DIR")
		}
		t.Skip("no kubelet (MANIFOLD_KUBELET is unset)")
	}
	n := &kubeNode{criEnv: newCRIEnv(t, kind, daemon, clusterPlane(t)), name: testenv.UniqueName("node-")}
	// The cluster tier (e2e/cluster), a test binary of its own, may hold the
	// machine's one kubelet for its whole run: wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	k, err := crinode.StartKubelet(ctx, bins, n.node, n.cp.KubeconfigPath, n.name, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Runs before the runtime's Stop, which removes the sandboxes.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log:\n%s", k.LogTail())
		}
		k.Stop()
		n.k8s.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{})
	})
	n.kubelet = k
	n.waitReady(true)
	return n
}

func (n *kubeNode) sub(t *testing.T) *kubeNode {
	return &kubeNode{criEnv: n.criEnv.sub(t), name: n.name, kubelet: n.kubelet}
}

type nodeCase struct {
	name string
	run  func(*kubeNode)
}

// nodeCases runs the cases on a kubelet on the runtime kind. The DaemonSet
// case, about the kubelet and the API rather than the runtime, runs on
// containerd only; the cluster tier runs manifold's DaemonSets on both.
func nodeCases(t *testing.T, kind string, daemon bool) {
	n := newKubeNode(t, kind, daemon)
	cases := []nodeCase{
		{"pod with a NAD", nodePodWithNAD},
		{"readiness", nodeReadiness},
		{"missing NAD", nodeMissingNAD},
		{"10 pods", nodeTenPods},
	}
	if kind == containerdKind {
		cases = append(cases, nodeCase{"DaemonSet", nodeDaemonSet})
	}
	for _, c := range cases {
		if !t.Run(c.name, func(t *testing.T) { c.run(n.sub(t)) }) {
			return
		}
	}
}

// userPod creates a pod on the node as a user would: the test image, never
// pulled, no cluster DNS.
func (n *kubeNode) userPod(annotations map[string]string) *corev1.Pod {
	n.t.Helper()
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("app-"), Namespace: n.ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      n.name,
			DNSPolicy:                     corev1.DNSDefault,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: crinode.ImageRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{crinode.Pause}}},
		},
	}
	created, err := n.k8s.CoreV1().Pods(n.ns).Create(n.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatalf("create pod: %v", err)
	}
	return created
}

// waitRunning waits for the pod to be Running and returns it.
func (n *kubeNode) waitRunning(p *corev1.Pod) *corev1.Pod {
	n.t.Helper()
	deadline := time.Now().Add(nodeWait)
	for {
		got := n.getPod(p)
		if got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
			return got
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("pod %s/%s is %s after %s; events: %v", p.Namespace, p.Name, got.Status.Phase, nodeWait, eventMessages(n.events(p)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deleteAndWait deletes the pods and waits until the API has none of them:
// the kubelet has stopped their sandboxes (manifold's DEL) first.
func (n *kubeNode) deleteAndWait(pods ...*corev1.Pod) {
	n.t.Helper()
	for _, p := range pods {
		if err := n.k8s.CoreV1().Pods(p.Namespace).Delete(n.ctx(), p.Name, metav1.DeleteOptions{}); err != nil {
			n.t.Fatalf("delete pod %s: %v", p.Name, err)
		}
	}
	deadline := time.Now().Add(nodeWait)
	for _, p := range pods {
		for {
			_, err := n.k8s.CoreV1().Pods(p.Namespace).Get(n.ctx(), p.Name, metav1.GetOptions{})
			if err != nil && strings.Contains(err.Error(), "not found") {
				break
			}
			if time.Now().After(deadline) {
				n.t.Fatalf("pod %s still in the API %s after its deletion (%v)", p.Name, nodeWait, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// waitEmpty waits (bounded) until nothing of any sandbox is left on the node.
func (n *kubeNode) waitEmpty() {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := n.leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			n.t.Errorf("30s after the pods went: %v", left)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sandboxOf is the ID of the pod's sandbox in the runtime.
func (n *kubeNode) sandboxOf(p *corev1.Pod) string {
	n.t.Helper()
	list, err := n.node.CRIClient().Runtime.ListPodSandbox(n.ctx(), &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)}}})
	if err != nil || len(list.Items) == 0 {
		n.t.Fatalf("sandbox of pod %s: %v (%d found)", p.Name, err, len(list.GetItems()))
	}
	return list.Items[0].Id
}

// waitReady waits for the node's Ready condition to be want and returns its
// message.
func (n *kubeNode) waitReady(want bool) string {
	n.t.Helper()
	wantStatus := corev1.ConditionFalse
	if want {
		wantStatus = corev1.ConditionTrue
	}
	deadline := time.Now().Add(nodeWait)
	var last string
	for {
		node, err := n.k8s.CoreV1().Nodes().Get(n.ctx(), n.name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == wantStatus {
						return c.Message
					}
					last = fmt.Sprintf("%s: %s", c.Status, c.Message)
				}
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %s Ready is %q after %s, want %s", n.name, last, nodeWait, wantStatus)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A pod with a NAD is Running, with network-status, AddedInterface events,
// and status.podIP equal to manifold's eth0; deleting it leaves nothing.
func nodePodWithNAD(n *kubeNode) {
	t := n.t
	blue := nextSubnet()
	n.bridgeNAD("blue", blue)
	p := n.waitRunning(n.userPod(map[string]string{annotNetworks: "blue"}))
	ips := n.waitStatus(p, 3)
	if p.Status.PodIP != ips["eth0"] {
		t.Errorf("status.podIP = %s, want manifold's eth0 %s (network-status %v)", p.Status.PodIP, ips["eth0"], ips)
	}
	if !blue.Contains(net.ParseIP(ips["net2"])) {
		t.Errorf("net2 = %q, want an address in %s", ips["net2"], blue)
	}
	deadline := time.Now().Add(reportWait)
	for len(eventsOf(n.events(p), corev1.EventTypeNormal, "AddedInterface")) != 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if added := eventsOf(n.events(p), corev1.EventTypeNormal, "AddedInterface"); len(added) != 3 {
		t.Errorf("AddedInterface events = %v, want 3", eventMessages(added))
	}
	id := n.sandboxOf(p)
	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkGone(id)
}

// A missing readiness file turns the node NotReady with manifold's message;
// the node comes back when the file does. containerd asks STATUS at each of
// the kubelet's runtime status calls; CRI-O only from its start until the
// first success (runtime_crio_test.go), so on CRI-O the file is removed
// while CRI-O is down and the node's condition is the one it starts with.
func nodeReadiness(n *kubeNode) {
	t := n.t
	want := "readiness indicator file " + n.readyFile + " is missing"
	if n.kind == crioKind {
		n.crio().Shutdown()
	}
	if err := os.Remove(n.readyFile); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			os.WriteFile(n.readyFile, nil, 0o644)
		}
	}()
	if n.kind == crioKind {
		if err := n.node.Restart(n.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	// While CRI-O restarts, the node may first be NotReady for the
	// runtime's being down: wait for manifold's message.
	deadline := time.Now().Add(nodeWait)
	for msg := n.waitReady(false); !strings.Contains(msg, want); msg = n.waitReady(false) {
		if time.Now().After(deadline) {
			t.Fatalf("node NotReady message %q does not hold manifold's %q after %s", msg, want, nodeWait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("node NotReady with manifold's message %q", want)
	n.writeFile(n.readyFile, "")
	restored = true
	n.waitReady(true)
}

// A missing NAD shows manifold's message in the pod's FailedCreatePodSandbox
// event.
func nodeMissingNAD(n *kubeNode) {
	t := n.t
	p := n.userPod(map[string]string{annotNetworks: "nowhere"})
	want := "network " + n.ns + "/nowhere: NetworkAttachmentDefinition not found"
	deadline := time.Now().Add(nodeWait)
	for {
		failed := eventsOf(n.events(p), corev1.EventTypeWarning, "FailedCreatePodSandBox")
		if len(failed) > 0 {
			if !strings.Contains(failed[0].Message, want) {
				t.Errorf("FailedCreatePodSandBox event %q does not hold manifold's %q", failed[0].Message, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no FailedCreatePodSandBox event after %s; events: %v", nodeWait, eventMessages(n.events(p)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.deleteAndWait(p)
	n.waitEmpty()
}

// 10 pods at once get distinct addresses and are deleted clean.
func nodeTenPods(n *kubeNode) {
	t := n.t
	var pods []*corev1.Pod
	for range 10 {
		pods = append(pods, n.userPod(nil))
	}
	seen := map[string]string{}
	for i, p := range pods {
		p = n.waitRunning(p)
		pods[i] = p
		if !n.cluster.Contains(net.ParseIP(p.Status.PodIP)) {
			t.Errorf("pod %s: podIP %s, want one in %s", p.Name, p.Status.PodIP, n.cluster)
		}
		if other, dup := seen[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share %s", other, p.Name, p.Status.PodIP)
		}
		seen[p.Status.PodIP] = p.Name
	}
	n.deleteAndWait(pods...)
	n.waitEmpty()
}
