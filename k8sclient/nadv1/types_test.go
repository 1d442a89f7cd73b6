package nadv1

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/manifold-cni/manifold/k8sclient"
)

const conf = `{"cniVersion":"1.0.0","name":"a","type":"macvlan","master":"eth1"}`

// TestWireCompatibleWithPlugin holds the plugin's lean type to the same JSON:
// what an admin client writes, the plugin must read field for field.
func TestWireCompatibleWithPlugin(t *testing.T) {
	n := New("ns1", "macvlan-a", conf)
	n.UID = "1234-5678"
	n.ResourceVersion = "42"
	n.Annotations = map[string]string{"k8s.v1.cni.cncf.io/resourceName": "intel.com/vf"}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var lean k8sclient.NetworkAttachmentDefinition
	if err := json.Unmarshal(b, &lean); err != nil {
		t.Fatal(err)
	}
	want := k8sclient.NetworkAttachmentDefinition{
		APIVersion: "k8s.cni.cncf.io/v1", Kind: "NetworkAttachmentDefinition",
		Metadata: k8sclient.ObjectMeta{Name: "macvlan-a", Namespace: "ns1", UID: "1234-5678", ResourceVersion: "42",
			Annotations: map[string]string{"k8s.v1.cni.cncf.io/resourceName": "intel.com/vf"}},
		Spec: k8sclient.NetworkAttachmentDefinitionSpec{Config: conf},
	}
	if !reflect.DeepEqual(lean, want) {
		t.Errorf("plugin decodes\n%+v\nwant\n%+v\nfrom %s", lean, want, b)
	}
}

func TestUnstructuredRoundTrip(t *testing.T) {
	n := New("ns1", "b", conf)
	n.Labels = map[string]string{"team": "net"}
	u, err := n.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "k8s.cni.cncf.io/v1" || u.GetKind() != "NetworkAttachmentDefinition" || u.GetNamespace() != "ns1" || u.GetName() != "b" {
		t.Errorf("unstructured %v", u.Object)
	}
	if got := u.Object["spec"].(map[string]any)["config"]; got != conf {
		t.Errorf("spec.config %v", got)
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if back.Spec.Config != conf || back.Labels["team"] != "net" || back.Name != "b" {
		t.Errorf("round trip gave %+v", back)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	l := &NetworkAttachmentDefinitionList{Items: []NetworkAttachmentDefinition{*New("ns", "a", conf)}}
	l.Items[0].Labels = map[string]string{"k": "v"}
	c := l.DeepCopyObject().(*NetworkAttachmentDefinitionList)
	c.Items[0].Labels["k"] = "changed"
	c.Items[0].Spec.Config = "{}"
	if l.Items[0].Labels["k"] != "v" || l.Items[0].Spec.Config != conf {
		t.Errorf("copy shares state with the original: %+v", l.Items[0])
	}
	var nilNAD *NetworkAttachmentDefinition
	if nilNAD.DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}

func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"NetworkAttachmentDefinition", "NetworkAttachmentDefinitionList"} {
		if !s.Recognizes(SchemeGroupVersion.WithKind(kind)) {
			t.Errorf("scheme does not know %s", kind)
		}
	}
	obj, err := s.New(SchemeGroupVersion.WithKind("NetworkAttachmentDefinition"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obj.(*NetworkAttachmentDefinition); !ok {
		t.Errorf("scheme made a %T", obj)
	}
	if !s.Recognizes(SchemeGroupVersion.WithKind("ListOptions")) {
		t.Errorf("scheme lacks the meta/v1 options for %s", SchemeGroupVersion)
	}
}
