// Package webhook is manifold's validating admission webhook
// (docs/validation.md): the AdmissionReview handler over package
// admission's checks, its TLS server, and the serving certificate it makes,
// keeps in a Secret, rotates and publishes as its webhook configuration's
// caBundle, unless cert-manager provides one.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/admission"
	"github.com/manifold-cni/manifold/k8sclient"
)

// maxReviewBytes bounds a request body: the API server sends objects of at
// most a few MiB (etcd's limit).
const maxReviewBytes = 8 << 20

// maxProblems bounds how many problems a denial lists.
const maxProblems = 10

// Handler answers AdmissionReviews (admission/v1) for the objects
// admission.CheckObject checks, with opts.
func Handler(opts admission.Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil || len(body) > maxReviewBytes {
			http.Error(w, "cannot read the request body", http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "the body is not an AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		resp := Review(review.Request, opts)
		out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
		if out.APIVersion == "" {
			out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&out)
	})
}

// Review decides one request: allowed unless the object breaks one of
// ADD's rules; a denial lists the problems (object, field, value, rule).
// Deletions, and objects the checks do not read, are allowed. An update is
// refused only for a problem the old object did not have: an object that
// was admitted while the webhook was down must stay updatable, or a
// controller could not even remove its finalizers.
func Review(req *admissionv1.AdmissionRequest, opts admission.Options) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation == admissionv1.Delete || len(req.Object.Raw) == 0 {
		return resp
	}
	problems, err := admission.CheckObject(req.Object.Raw, req.Namespace, opts)
	if err != nil {
		// The API server decoded the object before calling: what it sent
		// is an object. Refusing here would block writes for a bug of ours.
		resp.Warnings = []string{"manifold could not check the object: " + err.Error()}
		return resp
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		problems = newProblems(problems, req, opts)
	}
	if len(problems) == 0 {
		return resp
	}
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: denial(problems)}
	return resp
}

// denial is the message a user sees at kubectl apply. It names each object
// it refuses and says what ADD would do with it, in ADD's own words: the
// pods that the object would fail, and each problem's field, value and
// rule, the rule as ADD's code-7 error gives it (a NAD's rule names its
// network as ADD does, "network ns/name: ..."; a pod's is prefixed with
// "pod ns/name: ", as ADD prefixes its error).
func denial(ps []admission.Problem) string {
	var objects []string
	byObject := map[string][]string{}
	for i, p := range ps {
		if i == maxProblems {
			last := objects[len(objects)-1]
			byObject[last] = append(byObject[last], fmt.Sprintf("and %d more", len(ps)-i))
			break
		}
		if _, ok := byObject[p.Object]; !ok {
			objects = append(objects, p.Object)
		}
		byObject[p.Object] = append(byObject[p.Object], problemAtADD(p))
	}
	var out []string
	for _, o := range objects {
		out = append(out, "manifold refuses "+o+": "+outcome(o)+": "+strings.Join(byObject[o], "; "))
	}
	return strings.Join(out, "; and ")
}

// outcome says which pods' ADD the object would fail. object is
// admission's "Kind ns/name".
func outcome(object string) string {
	kind, ref, _ := strings.Cut(object, " ")
	switch kind {
	case k8sclient.NADKind:
		return "the ADD of every pod that asks for network " + ref + " would fail with CNI code 7"
	case "Pod":
		return "its ADD would fail with CNI code 7"
	default:
		return "the ADD of each of its pods would fail with CNI code 7"
	}
}

// problemAtADD is one problem: the field, its value, and the rule as ADD
// would word it.
func problemAtADD(p admission.Problem) string {
	rule := p.Rule
	if kind, ref, _ := strings.Cut(p.Object, " "); kind == "Pod" && !strings.HasPrefix(rule, "pod "+ref+": ") {
		rule = "pod " + ref + ": " + rule
	}
	return fmt.Sprintf("%s %q: %s", p.Field, p.Value, rule)
}

// newProblems is the problems of the request's object that its old object
// did not have (the same field and value breaking the same rule).
func newProblems(ps []admission.Problem, req *admissionv1.AdmissionRequest, opts admission.Options) []admission.Problem {
	old, err := admission.CheckObject(req.OldObject.Raw, req.Namespace, opts)
	if err != nil {
		return ps
	}
	had := map[admission.Problem]bool{}
	for _, p := range old {
		had[p] = true
	}
	var out []admission.Problem
	for _, p := range ps {
		if !had[p] {
			out = append(out, p)
		}
	}
	return out
}
