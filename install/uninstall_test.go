package install

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The installer's pod and its DaemonSet, as the API server has them.
func installerObjects(dsUID types.UID, ownerUID types.UID, deleting bool) (*corev1.Pod, *appsv1.DaemonSet) {
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "manifold-abcde", Namespace: "kube-system",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "manifold", UID: ownerUID, Controller: &yes}}}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "manifold", Namespace: "kube-system", UID: dsUID}}
	if deleting {
		now := metav1.Now()
		ds.DeletionTimestamp = &now
		ds.Finalizers = []string{"foregroundDeletion"}
	}
	return pod, ds
}

// otherMode is the thick DaemonSet, with its pod on node: the other mode
// during a switch.
func otherMode(deleting bool, node string) []runtime.Object {
	sel := map[string]string{"app.kubernetes.io/name": "manifold-thick"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "manifold-thick", Namespace: "kube-system", UID: "t1"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}}
	if deleting {
		now := metav1.Now()
		ds.DeletionTimestamp = &now
		ds.Finalizers = []string{"foregroundDeletion"}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "manifold-thick-fghij", Namespace: "kube-system", Labels: sel},
		Spec: corev1.PodSpec{NodeName: node}}
	return []runtime.Object{ds, pod}
}

// TestStopReason: only a DaemonSet that is gone, being deleted or replaced,
// an orphaned pod, or permissions that are gone make a stop an uninstall;
// a DaemonSet that stays, the other mode's DaemonSet with a pod on this
// node (a switch of modes, whatever the node lock says), or an API that
// cannot be asked, does not.
func TestStopReason(t *testing.T) {
	refuse := func(err error) func(*fake.Clientset) {
		return func(c *fake.Clientset) {
			c.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		}
	}
	for _, tc := range []struct {
		name      string
		objects   func() []runtime.Object
		react     func(*fake.Clientset)
		uninstall bool
		mention   string
	}{
		{name: "DaemonSet stays", objects: func() []runtime.Object {
			p, d := installerObjects("u1", "u1", false)
			return []runtime.Object{p, d}
		}, mention: "stays"},
		{name: "DaemonSet gone", objects: func() []runtime.Object {
			p, _ := installerObjects("u1", "u1", false)
			return []runtime.Object{p}
		}, uninstall: true, mention: "is gone"},
		{name: "DaemonSet being deleted", objects: func() []runtime.Object {
			p, d := installerObjects("u1", "u1", true)
			return []runtime.Object{p, d}
		}, uninstall: true, mention: "being deleted"},
		{name: "DaemonSet replaced", objects: func() []runtime.Object {
			p, d := installerObjects("u2", "u1", false)
			return []runtime.Object{p, d}
		}, uninstall: true, mention: "replaced"},
		{name: "orphaned pod", objects: func() []runtime.Object {
			p, d := installerObjects("u1", "u1", false)
			p.OwnerReferences = nil
			return []runtime.Object{p, d}
		}, uninstall: true, mention: "no DaemonSet"},
		{name: "switch of modes", objects: func() []runtime.Object {
			p, d := installerObjects("u1", "u1", true)
			return append([]runtime.Object{p, d}, otherMode(false, "node-1")...)
		}, mention: "takes manifold over"},
		{name: "other mode being deleted too", objects: func() []runtime.Object {
			p, d := installerObjects("u1", "u1", true)
			return append([]runtime.Object{p, d}, otherMode(true, "node-1")...)
		}, uninstall: true, mention: "being deleted"},
		{name: "other mode on other nodes only", objects: func() []runtime.Object {
			p, _ := installerObjects("u1", "u1", false)
			return append([]runtime.Object{p}, otherMode(false, "node-2")...)
		}, uninstall: true, mention: "is gone"},
		{name: "token refused", objects: func() []runtime.Object { return nil },
			react: refuse(apierrors.NewUnauthorized("token revoked")), uninstall: true, mention: "refused"},
		{name: "role gone", objects: func() []runtime.Object { return nil },
			react: refuse(apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "manifold-abcde", errors.New("no rule"))), uninstall: true, mention: "no longer"},
		{name: "API unreachable", objects: func() []runtime.Object { return nil },
			react: refuse(errors.New("dial tcp 10.96.0.1:443: connect: connection refused")), mention: "cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects()...)
			if tc.react != nil {
				tc.react(client)
			}
			uninstall, why := stopReason(context.Background(), client, "kube-system", "manifold-abcde", "node-1")
			if uninstall != tc.uninstall || !strings.Contains(why, tc.mention) {
				t.Errorf("stopReason = %v, %q; want %v and a reason with %q", uninstall, why, tc.uninstall, tc.mention)
			}
		})
	}
}

// TestStopKeepsConfigWhileDaemonSetStays: an installer whose pod is deleted
// (SIGTERM) while its DaemonSet stays leaves manifold's config in place, even
// with --cleanup-config-on-exit and no other installer on the node, so that
// pods created before the DaemonSet's next pod starts still get their
// networks (multus-cni#1527). Once the DaemonSet is deleted, the same stop
// removes it. Before this, the first stop removed the config too.
func TestStopKeepsConfigWhileDaemonSetStays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects func() []runtime.Object
		removed bool
	}{
		{"DaemonSet stays", func() []runtime.Object { p, d := installerObjects("u1", "u1", false); return []runtime.Object{p, d} }, false},
		{"DaemonSet deleted", func() []runtime.Object { p, _ := installerObjects("u1", "u1", false); return []runtime.Object{p} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, true)
			n.o.CleanupConfigOnExit = true
			n.env = map[string]string{envPodName: "manifold-abcde", envPodNamespace: "kube-system"}
			client := fake.NewClientset(tc.objects()...)
			n.o.newClient = func() (kubernetes.Interface, error) { return client, nil }
			n.writeConf(t, "10-bridge.conf", bridgeConf)
			cancel, done := n.start(t)
			n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("installer did not stop")
			}
			_, err := os.Stat(n.confOut)
			if removed := errors.Is(err, os.ErrNotExist); removed != tc.removed {
				t.Errorf("config removed = %v (stat: %v), want %v; logs:\n%s", removed, err, tc.removed, n.logs)
			}
		})
	}
}
