package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/manifold-cni/manifold/admission"
)

func podWith(networks string) []byte {
	return []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"k8s.v1.cni.cncf.io/networks":"` + networks + `"}}}`)
}

// TestUpdateRefusedOnlyForNewProblems: a pod admitted while the webhook was
// down, with a bad annotation, must stay updatable (a controller removing
// its finalizer), but an update that makes a new problem is refused.
func TestUpdateRefusedOnlyForNewProblems(t *testing.T) {
	bad, worse, good := podWith("a@data, b@data"), podWith("a@x, b@x"), podWith("a@data")
	for _, tc := range []struct {
		name     string
		op       admissionv1.Operation
		old, obj []byte
		allowed  bool
	}{
		{"create bad", admissionv1.Create, nil, bad, false},
		{"update keeps the old problem", admissionv1.Update, bad, bad, true},
		{"update makes a new problem", admissionv1.Update, bad, worse, false},
		{"update breaks a good pod", admissionv1.Update, good, bad, false},
		{"update fixes it", admissionv1.Update, bad, good, true},
	} {
		req := &admissionv1.AdmissionRequest{UID: "u", Operation: tc.op, Namespace: "ns",
			Object: runtime.RawExtension{Raw: tc.obj}, OldObject: runtime.RawExtension{Raw: tc.old}}
		if r := Review(req, admission.Options{}); r.Allowed != tc.allowed || r.UID != "u" {
			t.Errorf("%s: allowed %v, want %v (%+v)", tc.name, r.Allowed, tc.allowed, r.Result)
		}
	}
}

// TestDenialNamesTheObjectInADDsWords: a refusal names the object it
// refuses, says which pods' ADD it would fail, and gives each problem's
// field and value with the rule as ADD words it ("network ns/name: ..." for
// a NAD, "pod ns/name: ..." for a pod). It never speaks of "the pod's
// networks" for a NAD, which has no pod.
func TestDenialNamesTheObjectInADDsWords(t *testing.T) {
	for _, tc := range []struct {
		name, obj string
		want      []string
	}{
		{"nad", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"nested","namespace":"ns"},"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"type\":\"multus\"}"}}`,
			[]string{"manifold refuses NetworkAttachmentDefinition ns/nested: the ADD of every pod that asks for network ns/nested would fail with CNI code 7: spec.config ",
				`: network ns/nested: plugin 0 type "multus" is a meta-plugin`}},
		{"pod", string(podWith("a@data, b@data")),
			[]string{"manifold refuses Pod ns/p: its ADD would fail with CNI code 7: metadata.annotations[k8s.v1.cni.cncf.io/networks] \"a@data, b@data\": pod ns/p: network ns/b: interface name \"data\" is already taken by network ns/a"}},
		{"deployment", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns"},"spec":{"template":{"metadata":{"annotations":{"v1.multus-cni.io/default-network":"a, b"}}}}}`,
			[]string{"manifold refuses Deployment ns/web: the ADD of each of its pods would fail with CNI code 7: spec.template.metadata.annotations[v1.multus-cni.io/default-network] \"a, b\": ", "it must name exactly one"}},
	} {
		req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "ns", Object: runtime.RawExtension{Raw: []byte(tc.obj)}}
		r := Review(req, admission.Options{})
		if r.Allowed || r.Result == nil {
			t.Errorf("%s: allowed", tc.name)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(r.Result.Message, s) {
				t.Errorf("%s: refusal %q does not say %q", tc.name, r.Result.Message, s)
			}
		}
		if strings.Contains(r.Result.Message, "the pod's networks") {
			t.Errorf("%s: refusal %q speaks of the pod's networks", tc.name, r.Result.Message)
		}
	}
}
