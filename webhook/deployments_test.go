package webhook

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	admregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/manifold-cni/manifold/admission"
)

// webhookManifest decodes deployments/webhook.yaml strictly, by kind.
func webhookManifest(t *testing.T) map[string][]any {
	t.Helper()
	data, err := os.ReadFile("../deployments/webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch tm.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "Secret":
			obj = &corev1.Secret{}
		case "Service":
			obj = &corev1.Service{}
		case "Role", "ClusterRole":
			obj = &rbacv1.Role{}
		case "RoleBinding", "ClusterRoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "ValidatingWebhookConfiguration":
			obj = &admregv1.ValidatingWebhookConfiguration{}
		default:
			t.Fatalf("unexpected kind %q", tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: %v", tm.Kind, err)
		}
		out[tm.Kind] = append(out[tm.Kind], obj)
	}
}

// TestWebhookManifest holds deployments/webhook.yaml to what the issue and
// docs/validation.md promise: fail-open, a short timeout, kube-system left
// out, every kind the checks read and no other, 2 replicas under a PDB, and
// rights on its own Secret and webhook configuration only, by name.
func TestWebhookManifest(t *testing.T) {
	objs := webhookManifest(t)
	vwc := objs["ValidatingWebhookConfiguration"][0].(*admregv1.ValidatingWebhookConfiguration)
	covered := map[string]bool{}
	for _, w := range vwc.Webhooks {
		if w.FailurePolicy == nil || *w.FailurePolicy != admregv1.Ignore {
			t.Errorf("webhook %s: failurePolicy is not Ignore", w.Name)
		}
		if w.TimeoutSeconds == nil || *w.TimeoutSeconds > 5 {
			t.Errorf("webhook %s: timeoutSeconds is not at most 5", w.Name)
		}
		if w.SideEffects == nil || *w.SideEffects != admregv1.SideEffectClassNone {
			t.Errorf("webhook %s: sideEffects is not None", w.Name)
		}
		sel := w.NamespaceSelector
		if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpNotIn ||
			!slices.Contains(sel.MatchExpressions[0].Values, "kube-system") {
			t.Errorf("webhook %s: kube-system is not left out: %+v", w.Name, sel)
		}
		if s := w.ClientConfig.Service; s == nil || s.Name != "manifold-webhook" || s.Namespace != "kube-system" || s.Path == nil || *s.Path != "/validate" {
			t.Errorf("webhook %s: clientConfig %+v", w.Name, w.ClientConfig)
		}
		for _, r := range w.Rules {
			if !slices.Equal(r.Operations, []admregv1.OperationType{admregv1.Create, admregv1.Update}) {
				t.Errorf("webhook %s: operations %v", w.Name, r.Operations)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					covered[g+"/"+res] = true
				}
			}
		}
	}
	want := map[string]bool{}
	plural := map[string]string{"NetworkAttachmentDefinition": "network-attachment-definitions"}
	for g, kinds := range admission.Kinds {
		for _, k := range kinds {
			p := plural[k]
			if p == "" {
				p = toLowerPlural(k)
			}
			want[g+"/"+p] = true
		}
	}
	for k := range want {
		if !covered[k] {
			t.Errorf("no webhook sends %s, which the checks read", k)
		}
	}
	for k := range covered {
		if !want[k] {
			t.Errorf("a webhook sends %s, which the checks do not read", k)
		}
	}

	d := objs["Deployment"][0].(*appsv1.Deployment)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.ServiceAccountName != "manifold-webhook" {
		t.Errorf("Deployment: replicas %v, service account %q", d.Spec.Replicas, d.Spec.Template.Spec.ServiceAccountName)
	}
	pdb := objs["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB: minAvailable %v", pdb.Spec.MinAvailable)
	}
	for _, o := range append(objs["Role"], objs["ClusterRole"]...) {
		for _, r := range o.(*rbacv1.Role).Rules {
			if len(r.ResourceNames) != 1 || !slices.Equal(r.Verbs, []string{"get", "update"}) {
				t.Errorf("role %s: rule %+v is not get and update of one object by name", o.(*rbacv1.Role).Name, r)
			}
		}
	}
}

func toLowerPlural(kind string) string {
	b := []byte(kind)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b) + "s"
}
