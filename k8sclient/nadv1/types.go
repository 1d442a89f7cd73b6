// Package nadv1 is the NetworkAttachmentDefinition API (k8s.cni.cncf.io/v1) as
// apimachinery types, for programs that manage NADs through client-go: the e2e
// tests, the demo and the benchmark. It is our own, because the upstream
// client module cannot be fetched here and manifold should not depend on it.
//
// The plugin does not import this package. It decodes the few fields it reads
// into k8sclient.NetworkAttachmentDefinition, which keeps apimachinery's
// package initialisation out of every ADD and DEL (docs/performance.md). The
// JSON of both is the same; nadv1's tests hold them to that.
package nadv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifold-cni/manifold/k8sclient"
)

// SchemeGroupVersion is the NAD API group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: k8sclient.NADGroup, Version: k8sclient.NADVersion}

// Resource is the NAD resource, for the dynamic client and RBAC checks.
var Resource = SchemeGroupVersion.WithResource(k8sclient.NADResource)

// NetworkAttachmentDefinition names a network that pods may attach to; its
// spec.config is the delegate's CNI config, or empty to look it up in confDir.
type NetworkAttachmentDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NetworkAttachmentDefinitionSpec `json:"spec"`
}

// NetworkAttachmentDefinitionSpec holds the CNI config as a JSON string.
type NetworkAttachmentDefinitionSpec struct {
	Config string `json:"config,omitempty"`
}

// NetworkAttachmentDefinitionList is a list of NADs.
type NetworkAttachmentDefinitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NetworkAttachmentDefinition `json:"items"`
}

// New returns a NAD with its type meta filled in.
func New(namespace, name, config string) *NetworkAttachmentDefinition {
	return &NetworkAttachmentDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: k8sclient.NADKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       NetworkAttachmentDefinitionSpec{Config: config},
	}
}

// ToUnstructured converts n for the dynamic client.
func (n *NetworkAttachmentDefinition) ToUnstructured() (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromUnstructured converts an object read through the dynamic client.
func FromUnstructured(u *unstructured.Unstructured) (*NetworkAttachmentDefinition, error) {
	n := &NetworkAttachmentDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, n); err != nil {
		return nil, err
	}
	return n, nil
}

// DeepCopyInto copies n into out.
func (n *NetworkAttachmentDefinition) DeepCopyInto(out *NetworkAttachmentDefinition) {
	*out = *n
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
}

// DeepCopy returns a copy of n.
func (n *NetworkAttachmentDefinition) DeepCopy() *NetworkAttachmentDefinition {
	if n == nil {
		return nil
	}
	out := new(NetworkAttachmentDefinition)
	n.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (n *NetworkAttachmentDefinition) DeepCopyObject() runtime.Object {
	if c := n.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *NetworkAttachmentDefinitionList) DeepCopyInto(out *NetworkAttachmentDefinitionList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]NetworkAttachmentDefinition, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of l.
func (l *NetworkAttachmentDefinitionList) DeepCopy() *NetworkAttachmentDefinitionList {
	if l == nil {
		return nil
	}
	out := new(NetworkAttachmentDefinitionList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *NetworkAttachmentDefinitionList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// AddToScheme registers the NAD types, so typed clients and codecs know them.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &NetworkAttachmentDefinition{}, &NetworkAttachmentDefinitionList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
