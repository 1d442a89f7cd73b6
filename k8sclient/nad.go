package k8sclient

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
	APIVersion string                          `json:"apiVersion,omitempty"`
	Kind       string                          `json:"kind,omitempty"`
	Metadata   ObjectMeta                      `json:"metadata"`
	Spec       NetworkAttachmentDefinitionSpec `json:"spec"`
}

// ObjectMeta is the part of an object's metadata that manifold reads.
type ObjectMeta struct {
	Name            string `json:"name,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// NetworkAttachmentDefinitionSpec holds the delegate's CNI config as a string.
// An empty config means "look in confDir for a config of the NAD's name".
type NetworkAttachmentDefinitionSpec struct {
	Config string `json:"config"`
}
