package netconf

import "strings"

// The pod annotations that ask for networks (DESIGN §3, §4).
const (
	AnnotNetworks       = "k8s.v1.cni.cncf.io/networks"
	AnnotDefaultNetwork = "v1.multus-cni.io/default-network"
)

// RuntimeIfName is the CNI_IFNAME that the CRI runtimes (containerd, CRI-O)
// give a pod's default network. The checks made before a pod reaches a node
// (package admission) assume it; ADD uses the runtime's own.
const RuntimeIfName = "eth0"

// PodRequest is what a pod's annotations ask for, parsed as ADD parses them:
// the default-network override (nil: none) and the networks, each with the
// error that stopped its parse (a CNI error with code 7).
type PodRequest struct {
	Override    *NetworkSelection
	OverrideErr error
	Networks    []NetworkSelection
	NetworksErr error
}

// ParsePodRequest parses a pod's AnnotDefaultNetwork (its namespace defaults
// to systemNamespace) and AnnotNetworks (to podNamespace).
func ParsePodRequest(annotations map[string]string, podNamespace, systemNamespace string) PodRequest {
	var r PodRequest
	if v := strings.TrimSpace(annotations[AnnotDefaultNetwork]); v != "" {
		r.Override, r.OverrideErr = ParseDefaultNetworkAnnotation(v, systemNamespace)
	}
	if v := annotations[AnnotNetworks]; strings.TrimSpace(v) != "" {
		r.Networks, r.NetworksErr = ParseNetworksAnnotation(v, podNamespace)
	}
	return r
}

// CheckIfNames applies AssignIfNames, ADD's rule for interface names, to
// the names the annotations ask for: the default network's (which must be
// podIfName) and the networks' own, none twice. A network that names no
// interface is left out: the name ADD gives it ("net<i>") depends on the
// node's static networks, which only the node knows. Errors are CNI errors
// with code 7, in ADD's words.
func (r *PodRequest) CheckIfNames(podIfName string) error {
	atts := []Attachment{{NAD: "the default network"}}
	if r.Override != nil {
		atts[0] = Attachment{NAD: r.Override.Namespace + "/" + r.Override.Name, IfName: r.Override.InterfaceRequest}
	}
	for _, sel := range r.Networks {
		if sel.InterfaceRequest != "" {
			atts = append(atts, Attachment{NAD: sel.Namespace + "/" + sel.Name, IfName: sel.InterfaceRequest})
		}
	}
	if err := AssignIfNames(atts, podIfName); err != nil {
		return Invalid("%v", err)
	}
	return nil
}
