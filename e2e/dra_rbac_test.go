package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestClaimStatusPermission finds, against the real API server of 1.36,
// what writing a DRA claim's status.devices takes, and that
// deployments/rbac.yaml grants that and no more. With the manifold
// ServiceAccount's token bound to node-a, as the installer requests it for
// the host (and with the installer's pod-bound token on node-a, its
// fallback), reading claims and listing ResourceSlices works, and a
// server-side apply of status.devices works on a claim allocated on
// node-a; the same apply on a claim allocated on node-b is refused, and so
// is one with a token bound to nothing, since the API server asks for
// resourceclaims/driver with the verb "associated-node:patch" (or
// "arbitrary-node:patch", which is not granted); changing
// status.allocation is refused (resourceclaims/binding).
func TestClaimStatusPermission(t *testing.T) {
	cp := controlPlane(t)
	applyDeployments(t, cp)
	admin := cp.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := (&env{t: t, cp: cp, k8s: admin}).namespace("e2e-dra-rbac-")

	// Node node-a, and the installer's pod on it.
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	grace := int64(0)
	pod, err := admin.CoreV1().Pods(saNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("manifold-")},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: saName, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "install", Image: "ghcr.io/manifold-cni/manifold:e2e"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(saNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	nodeBound := nodeToken(t, cp, node)
	user := whoAmI(t, cp, nodeBound)
	if nodes := user.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(nodes, []string{"node-a"}) {
		t.Fatalf("the node-bound token's node-name extra is %v, want [node-a]", nodes)
	}
	onA, onB := rbacClaim(t, admin, ns, "on-a", "node-a"), rbacClaim(t, admin, ns, "on-b", "node-b")

	sa := tokenClient(t, cp, nodeBound)
	if _, err := sa.ResourceV1().ResourceClaims(ns).Get(ctx, onA.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("get ResourceClaim: %v", err)
	}
	if _, err := sa.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + draDriver + ",spec.nodeName=node-a"}); err != nil {
		t.Errorf("list ResourceSlices: %v", err)
	}
	if err := applyDeviceStatus(ctx, sa, onA, "net1"); err != nil {
		t.Errorf("apply status.devices of a claim allocated on the token's node: %v", err)
	} else if got, _ := admin.ResourceV1().ResourceClaims(ns).Get(ctx, onA.Name, metav1.GetOptions{}); len(got.Status.Devices) != 1 || got.Status.Devices[0].NetworkData.InterfaceName != "net1" {
		t.Errorf("status.devices after the apply: %+v", got.Status.Devices)
	}
	// The installer's fallback, its pod's own token, carries the node too.
	if err := applyDeviceStatus(ctx, tokenClient(t, cp, mintToken(t, cp, pod, 600)), onA, "net0"); err != nil {
		t.Errorf("apply with the pod-bound token of a pod on the claim's node: %v", err)
	}
	// Not on the token's node, only arbitrary-node:patch would do.
	err = applyDeviceStatus(ctx, sa, onB, "net1")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `resource="resourceclaims/driver", verb="[arbitrary-node:patch]"`) {
		t.Errorf("apply on a claim of another node: %v, want refused for resourceclaims/driver arbitrary-node:patch", err)
	}
	// A change, so that the driver's entries are checked (an apply that
	// changes nothing is not).
	err = applyDeviceStatus(ctx, tokenClient(t, cp, mintToken(t, cp, nil, 600)), onA, "net2")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `verb="[arbitrary-node:patch]"`) {
		t.Errorf("apply with a token bound to no pod: %v, want refused for arbitrary-node:patch", err)
	}
	if err := applyDeviceStatus(ctx, sa, onA, "net2"); err != nil {
		t.Errorf("the node-bound token changing its entry: %v", err)
	}
	alloc := `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"` + onA.Name + `","namespace":"` + ns + `"},
		"status":{"allocation":{"devices":{"results":[{"request":"nic","driver":"` + draDriver + `","pool":"node-a","device":"nic-7"}]}}}}`
	_, err = sa.ResourceV1().ResourceClaims(ns).Patch(ctx, onA.Name, k8stypes.ApplyPatchType, []byte(alloc), metav1.PatchOptions{FieldManager: "manifold/x", Force: ptrTrue()}, "status")
	if err == nil || !strings.Contains(err.Error(), "resourceclaims/binding") {
		t.Errorf("changing the allocation: %v, want refused for resourceclaims/binding", err)
	}

	// What the grant is, as SubjectAccessReviews see the token's identity.
	for _, tc := range []struct {
		verb, resource, sub string
		allowed             bool
	}{
		{"get", "resourceclaims", "", true},
		{"list", "resourceslices", "", true},
		{"patch", "resourceclaims", "status", true},
		{"associated-node:patch", "resourceclaims", "driver", true},
		{"arbitrary-node:patch", "resourceclaims", "driver", false},
		{"associated-node:update", "resourceclaims", "driver", false},
		{"update", "resourceclaims", "status", false},
		{"patch", "resourceclaims", "binding", false},
		{"list", "resourceclaims", "", false},
		{"patch", "resourceclaims", "", false},
		{"create", "resourceslices", "", false},
		{"get", "resourceclaimtemplates", "", false},
	} {
		attrs := &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: "resource.k8s.io", Resource: tc.resource, Subresource: tc.sub, Namespace: ns, Name: draDriver}
		if tc.resource == "resourceslices" {
			attrs.Namespace, attrs.Name = "", ""
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: attrs,
			User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extraValues(user.Extra)}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s: allowed = %v, want %v", tc.verb, tc.resource, tc.sub, got.Status.Allowed, tc.allowed)
		}
	}
}

func ptrTrue() *bool { b := true; return &b }

// nodeToken is a token of the manifold ServiceAccount bound to node, as the
// installer requests it for manifold on the host.
func nodeToken(t *testing.T, cp *controlplane.ControlPlane, node *corev1.Node) string {
	t.Helper()
	seconds := int64(600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cp.Clientset().CoreV1().ServiceAccounts(saNamespace).CreateToken(ctx, saName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest bound to node %s: %v", node.Name, err)
	}
	return got.Status.Token
}

// rbacClaim is a ResourceClaim with one request, allocated device nic-0 of
// draDriver in node's pool.
func rbacClaim(t *testing.T, admin kubernetes.Interface, ns, name, node string) *resourcev1.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	rc, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "nic",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "nic", Driver: draDriver, Pool: node, Device: "nic-0"}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	if rc, err = admin.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return rc
}

// applyDeviceStatus is manifold's write: a server-side apply of the
// status.devices entry of the claim's device, with ifname as its
// networkData's interface, on the status subresource.
func applyDeviceStatus(ctx context.Context, cs kubernetes.Interface, rc *resourcev1.ResourceClaim, ifname string) error {
	res := rc.Status.Allocation.Devices.Results[0]
	body, err := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": rc.Name, "namespace": rc.Namespace},
		"status": map[string]any{"devices": []any{map[string]any{"driver": res.Driver, "pool": res.Pool, "device": res.Device,
			"networkData": map[string]any{"interfaceName": ifname}}}}})
	if err != nil {
		return err
	}
	_, err = cs.ResourceV1().ResourceClaims(rc.Namespace).Patch(ctx, rc.Name, k8stypes.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "manifold/c1"}, "status")
	return err
}
