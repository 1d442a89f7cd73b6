package k8sclient

import (
	"context"
	"fmt"
	"net/url"
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
	// Annotations carry a NAD's device-plugin resource
	// (k8s.v1.cni.cncf.io/resourceName).
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NetworkAttachmentDefinitionSpec holds the delegate's CNI config as a string.
// An empty config means "look in confDir for a config of the NAD's name".
type NetworkAttachmentDefinitionSpec struct {
	Config string `json:"config"`
}

// GetNAD reads one NetworkAttachmentDefinition with a consistent read: the API
// server reads it from etcd, so the answer holds every write made before the
// read, however recent.
//
// It is not read from the API server's watch cache. A cached read of any age
// (resourceVersion=0) could return a NAD from before the change an admin made
// just before creating the pod. A cached read "not older than the pod"
// (resourceVersion=<the pod's>) is fresh enough, but the server holds it until
// its NAD cache has caught up with the pod's version. NADs rarely change, so
// that cache learns it has caught up only from a progress notification from
// etcd, which the server asks for when such a read waits, and at most once
// every 100 ms. The kubelet writes a pod's status shortly before the runtime
// starts the pod's sandbox, so such a read often waits, for up to 100 ms when
// another NAD read asked for a notification just before: in a rollout, most
// of them. A consistent read costs one etcd read and does not wait
// (docs/performance-history.md, change 12).
func (c *Client) GetNAD(ctx context.Context, namespace, name string) (*NetworkAttachmentDefinition, error) {
	path := "/apis/" + NADGroup + "/" + NADVersion + "/namespaces/" + url.PathEscape(namespace) + "/" + NADResource + "/" + url.PathEscape(name)
	nad := &NetworkAttachmentDefinition{}
	if err := c.do(ctx, "GET", path, "", nil, nad); err != nil {
		return nil, fmt.Errorf("get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return nad, nil
}
