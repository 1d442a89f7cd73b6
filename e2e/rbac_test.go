package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestServiceAccountPermissions checks, with SubjectAccessReviews for the
// identity that a real token of the manifold ServiceAccount carries, that
// deployments/rbac.yaml grants exactly what manifold does (read a pod, patch
// its status, read a NAD by name, send events) and nothing around it. A few
// real requests made with that token then confirm that the reviews match what
// the API server enforces, including that a status patch cannot change a
// pod's spec.
func TestServiceAccountPermissions(t *testing.T) {
	cp := controlPlane(t)
	applyDeployments(t, cp)
	token := mintToken(t, cp, nil, 600)

	// Review the user, groups and extras the authenticator gives the token,
	// not a user name typed here: a grant to one of its groups counts too.
	user := whoAmI(t, cp, token)
	if user.Username != saUser {
		t.Fatalf("token authenticates as %q, want %q", user.Username, saUser)
	}
	for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"} {
		if !slices.Contains(user.Groups, g) {
			t.Errorf("token's groups %v lack %s", user.Groups, g)
		}
	}

	const cni = "k8s.cni.cncf.io"
	const nads = "network-attachment-definitions"
	for _, tc := range []struct {
		name                               string
		verb, group, resource, subresource string
		clusterScope                       bool
		namespace, object                  string
		allowed                            bool
	}{
		// What manifold does.
		{name: "get pods", verb: "get", resource: "pods", allowed: true},
		{name: "list pods", verb: "list", resource: "pods", allowed: true},
		{name: "watch pods", verb: "watch", resource: "pods", allowed: true},
		{name: "patch pods/status", verb: "patch", resource: "pods", subresource: "status", allowed: true},
		{name: "get NADs", verb: "get", group: cni, resource: nads, allowed: true},
		{name: "create events", verb: "create", resource: "events", allowed: true},
		{name: "create events.k8s.io events", verb: "create", group: "events.k8s.io", resource: "events", allowed: true},
		{name: "patch events", verb: "patch", resource: "events", allowed: true},

		// Pods: no other verb, and no spec changes.
		{name: "delete pods", verb: "delete", resource: "pods"},
		{name: "deletecollection pods", verb: "deletecollection", resource: "pods"},
		{name: "create pods", verb: "create", resource: "pods"},
		{name: "update pods", verb: "update", resource: "pods"},
		{name: "patch pods", verb: "patch", resource: "pods"},
		{name: "update pods/status", verb: "update", resource: "pods", subresource: "status"},
		{name: "get pods/status", verb: "get", resource: "pods", subresource: "status"},
		{name: "patch pods/ephemeralcontainers", verb: "patch", resource: "pods", subresource: "ephemeralcontainers"},
		{name: "create pods/exec", verb: "create", resource: "pods", subresource: "exec"},
		{name: "create pods/eviction", verb: "create", resource: "pods", subresource: "eviction"},
		{name: "create pods/binding", verb: "create", resource: "pods", subresource: "binding"},

		// NADs: read by name only.
		{name: "list NADs", verb: "list", group: cni, resource: nads},
		{name: "watch NADs", verb: "watch", group: cni, resource: nads},
		{name: "create NADs", verb: "create", group: cni, resource: nads},
		{name: "update NADs", verb: "update", group: cni, resource: nads},
		{name: "patch NADs", verb: "patch", group: cni, resource: nads},
		{name: "delete NADs", verb: "delete", group: cni, resource: nads},

		// Events: write only.
		{name: "list events", verb: "list", resource: "events"},
		{name: "delete events", verb: "delete", resource: "events"},

		// Nothing else.
		{name: "get secrets", verb: "get", resource: "secrets"},
		{name: "list secrets", verb: "list", resource: "secrets"},
		{name: "get configmaps", verb: "get", resource: "configmaps"},
		{name: "create serviceaccounts/token", verb: "create", resource: "serviceaccounts", subresource: "token"},
		{name: "get nodes", verb: "get", resource: "nodes", clusterScope: true},
		{name: "patch nodes/status", verb: "patch", resource: "nodes", subresource: "status", clusterScope: true},
		{name: "get namespaces", verb: "get", resource: "namespaces", clusterScope: true},
		{name: "update daemonsets", verb: "update", group: "apps", resource: "daemonsets"},

		// The installer, stopping, reads its own DaemonSet; no other.
		{name: "get DaemonSet manifold", verb: "get", group: "apps", resource: "daemonsets", namespace: "kube-system", object: "manifold", allowed: true},
		{name: "get DaemonSet manifold-thick", verb: "get", group: "apps", resource: "daemonsets", namespace: "kube-system", object: "manifold-thick", allowed: true},
		{name: "get another DaemonSet", verb: "get", group: "apps", resource: "daemonsets", namespace: "kube-system", object: "kube-proxy"},
		{name: "get DaemonSet manifold elsewhere", verb: "get", group: "apps", resource: "daemonsets", object: "manifold"},
		{name: "list daemonsets", verb: "list", group: "apps", resource: "daemonsets", namespace: "kube-system"},
		{name: "update DaemonSet manifold", verb: "update", group: "apps", resource: "daemonsets", namespace: "kube-system", object: "manifold"},

		// The installer requests manifold's node-bound token for its own
		// ServiceAccount; no other.
		{name: "create manifold's token", verb: "create", resource: "serviceaccounts", subresource: "token", namespace: "kube-system", object: "manifold", allowed: true},
		{name: "create another account's token", verb: "create", resource: "serviceaccounts", subresource: "token", namespace: "kube-system", object: "default"},

		// Taking over a thick Multus, the installer reads Multus's daemon
		// ConfigMap by name; no other ConfigMap, no list, no write.
		{name: "get Multus's daemon ConfigMap", verb: "get", resource: "configmaps", namespace: "kube-system", object: "multus-daemon-config", allowed: true},
		{name: "get another ConfigMap", verb: "get", resource: "configmaps", namespace: "kube-system", object: "kubeadm-config"},
		{name: "get Multus's daemon ConfigMap elsewhere", verb: "get", resource: "configmaps", namespace: "some-app", object: "multus-daemon-config"},
		{name: "list configmaps", verb: "list", resource: "configmaps", namespace: "kube-system"},
		{name: "watch configmaps", verb: "watch", resource: "configmaps", namespace: "kube-system"},
		{name: "update Multus's daemon ConfigMap", verb: "update", resource: "configmaps", namespace: "kube-system", object: "multus-daemon-config"},
		{name: "escalate clusterroles", verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", clusterScope: true},
		{name: "bind clusterroles", verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", clusterScope: true},
		{name: "impersonate users", verb: "impersonate", resource: "users", clusterScope: true},
		{name: "create CRDs", verb: "create", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", clusterScope: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := &authorizationv1.ResourceAttributes{
				Verb: tc.verb, Group: tc.group, Version: "*", Resource: tc.resource, Subresource: tc.subresource, Name: tc.object,
			}
			if !tc.clusterScope {
				// The binding is cluster-wide, so one namespace stands for
				// all; a user namespace, since manifold serves every pod.
				attrs.Namespace = "some-app"
				if tc.namespace != "" {
					attrs.Namespace = tc.namespace
				}
			}
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				ResourceAttributes: attrs,
				User:               user.Username,
				Groups:             user.Groups,
				UID:                user.UID,
				Extra:              extraValues(user.Extra),
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := cp.Clientset().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview: %v", err)
			}
			if got.Status.Allowed != tc.allowed {
				t.Errorf("%s: allowed = %v (reason %q), want %v", saUser, got.Status.Allowed, got.Status.Reason, tc.allowed)
			}
		})
	}

	t.Run("real requests", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin := cp.Clientset()
		pods := admin.CoreV1().Pods(metav1.NamespaceDefault)
		pod, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("rbac-")},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		t.Cleanup(func() { _ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
		sa := tokenClient(t, cp, token).CoreV1()

		if _, err := sa.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("get pod as %s: %v", saUser, err)
		}
		forbidden := func(what string, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s as %s: %v, want Forbidden", what, saUser, err)
			}
		}
		_, err = sa.Pods(pod.Namespace).Patch(ctx, pod.Name, k8stypes.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		forbidden("patch pod", err)
		forbidden("delete pod", sa.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		// The node daemon's hot-plug watches its node's pods.
		if _, err := sa.Pods(pod.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list pods as %s: %v", saUser, err)
		}
		_, err = sa.Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		forbidden("list secrets", err)

		// The status subresource takes the annotation and drops the spec.
		patch := `{"metadata":{"annotations":{"` + annotNetworkStatus + `":"[]"}},
			"spec":{"activeDeadlineSeconds":5,"containers":[{"name":"pause","image":"evil.example/pause:1"}]}}`
		if _, err := sa.Pods(pod.Namespace).Patch(ctx, pod.Name, k8stypes.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("patch pod status as %s: %v", saUser, err)
		}
		after, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Annotations[annotNetworkStatus] != "[]" {
			t.Errorf("annotations after the status patch = %v, want %s set", after.Annotations, annotNetworkStatus)
		}
		if after.Spec.ActiveDeadlineSeconds != nil || after.Spec.Containers[0].Image != pod.Spec.Containers[0].Image {
			t.Errorf("status patch changed the spec: activeDeadlineSeconds %v, image %s", after.Spec.ActiveDeadlineSeconds, after.Spec.Containers[0].Image)
		}
	})
}

func extraValues(in map[string]authenticationv1.ExtraValue) map[string]authorizationv1.ExtraValue {
	out := make(map[string]authorizationv1.ExtraValue, len(in))
	for k, v := range in {
		out[k] = authorizationv1.ExtraValue(v)
	}
	return out
}
