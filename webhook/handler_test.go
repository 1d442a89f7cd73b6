package webhook

import (
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
