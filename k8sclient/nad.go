package k8sclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NAD API coordinates (the CRD in deployments/crd.yaml).
const (
	NADGroup    = "k8s.cni.cncf.io"
	NADVersion  = "v1"
	NADResource = "network-attachment-definitions"
	NADKind     = "NetworkAttachmentDefinition"
)

// NetworkAttachmentDefinition is the CRD object that names a network pods may
// attach to. Our own type, so that manifold needs no third-party client.
type NetworkAttachmentDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NetworkAttachmentDefinitionSpec `json:"spec"`
}

// NetworkAttachmentDefinitionSpec holds the delegate's CNI config as a string.
// An empty config means "look in confDir for a config of the NAD's name".
type NetworkAttachmentDefinitionSpec struct {
	Config string `json:"config"`
}

// NetworkAttachmentDefinitionList is a list of NADs.
type NetworkAttachmentDefinitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NetworkAttachmentDefinition `json:"items"`
}
