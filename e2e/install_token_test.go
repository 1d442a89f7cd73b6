package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestInstallerTokenOutlivesItsPod: the token the installer puts on the host
// for manifold is one it requests for its ServiceAccount bound to its node,
// so that manifold keeps working when the installer's pod is deleted or
// evicted, in the seconds before the DaemonSet's next pod replaces it. The
// pod's own token, which the installer copied before, is refused as soon as
// its pod is gone: in those seconds, ADDs failed, and one that had read its
// NADs could not write its network-status.
func TestInstallerTokenOutlivesItsPod(t *testing.T) {
	e := newEnv(t)
	cp := e.cp
	n, o := e.installerNode(t)

	// The node the kubelet would have registered, and the installer's pod
	// on it, whose token the kubelet projects.
	nodeName := testenv.UniqueName("install-node-")
	if _, err := e.k8s.CoreV1().Nodes().Create(e.ctx(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.k8s.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("manifold-"), Namespace: saNamespace, Labels: n.ds.Spec.Template.Labels},
		Spec:       *n.ds.Spec.Template.Spec.DeepCopy(),
	}
	pod, err := e.k8s.CoreV1().Pods(saNamespace).Create(e.ctx(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create installer pod: %v", err)
	}
	t.Cleanup(func() {
		e.k8s.CoreV1().Pods(saNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	podToken := mintToken(t, cp, pod, n.tokenExpiration())
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	n.project(podToken, ca)
	t.Setenv("NODE_NAME", nodeName)
	in := n.start(o)
	hostToken := filepath.Join(o.HostCNIConfDir, "manifold.d", "token")
	in.waitFor(t, "a token on the host", 30*time.Second, func() bool { _, err := os.Stat(hostToken); return err == nil })
	token := string(mustRead(t, hostToken))
	if token == podToken {
		t.Fatal("the host's token is the pod's own")
	}
	who := whoAmI(t, cp, token)
	if who.Username != saUser || !slices.Equal(who.Extra["authentication.kubernetes.io/node-name"], []string{nodeName}) {
		t.Fatalf("the host's token is %s bound to node %v, want %s bound to %s", who.Username, who.Extra["authentication.kubernetes.io/node-name"], saUser, nodeName)
	}

	// The installer's pod is deleted: its own token is refused, the host's
	// is not.
	if err := e.k8s.CoreV1().Pods(saNamespace).Delete(e.ctx(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod's own token was refused %s after the pod's deletion", waitRejected(t, cp, podToken).Round(time.Millisecond))
	if who := whoAmI(t, cp, string(mustRead(t, hostToken))); who.Username != saUser {
		t.Errorf("after the installer's pod was deleted, the host's token authenticates as %q, want %s", who.Username, saUser)
	}
}
