package k8sclient

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

// The DRA API (resource.k8s.io/v1, stable since Kubernetes 1.34).
const (
	ResourceGroup   = "resource.k8s.io"
	ResourceVersion = "v1"
)

// ResourceClaim is the part of a resource.k8s.io/v1 ResourceClaim that
// manifold reads: who it is reserved for and which devices it was allocated.
type ResourceClaim struct {
	Metadata ObjectMeta  `json:"metadata"`
	Status   ClaimStatus `json:"status"`
}

// ClaimStatus is a ResourceClaim's status, as far as manifold reads it.
type ClaimStatus struct {
	// Allocation is nil until the scheduler has allocated the claim.
	Allocation  *ClaimAllocation `json:"allocation,omitempty"`
	ReservedFor []ClaimConsumer  `json:"reservedFor,omitempty"`
	Devices     []DeviceStatus   `json:"devices,omitempty"`
}

// ClaimAllocation is where and which devices a claim was allocated.
type ClaimAllocation struct {
	Devices struct {
		Results []AllocationResult `json:"results"`
	} `json:"devices"`
	NodeSelector *NodeSelector `json:"nodeSelector,omitempty"`
}

// AllocationResult is one allocated device, and the request it serves
// ("<request>", or "<request>/<subrequest>" for a prioritized list).
type AllocationResult struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// AdminAccess is set for a device that the claim may reach although
	// other claims use it (monitoring, say); it is nobody's to move.
	AdminAccess *bool   `json:"adminAccess,omitempty"`
	ShareID     *string `json:"shareID,omitempty"`
}

// NodeSelector is a core/v1 NodeSelector, down to the one shape the
// scheduler writes for a node-local allocation.
type NodeSelector struct {
	Terms []struct {
		MatchFields []struct {
			Key      string   `json:"key"`
			Operator string   `json:"operator"`
			Values   []string `json:"values"`
		} `json:"matchFields"`
		MatchExpressions []any `json:"matchExpressions"`
	} `json:"nodeSelectorTerms"`
}

// NodeName is the node an allocation is limited to when the selector is the
// scheduler's for a node-local device (one term, matching metadata.name to
// one value), and "" otherwise. The API server's node-associated permission
// for status.devices looks for the same shape.
func (a *ClaimAllocation) NodeName() string {
	if a == nil || a.NodeSelector == nil || len(a.NodeSelector.Terms) != 1 {
		return ""
	}
	t := a.NodeSelector.Terms[0]
	if len(t.MatchExpressions) != 0 || len(t.MatchFields) != 1 {
		return ""
	}
	f := t.MatchFields[0]
	if f.Key != "metadata.name" || f.Operator != "In" || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}

// ClaimConsumer is an entry of status.reservedFor.
type ClaimConsumer struct {
	APIGroup string `json:"apiGroup,omitempty"`
	Resource string `json:"resource"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
}

// ReservedForPod reports whether the claim is reserved for the pod of that
// namespace (the claim's own), name and UID; an empty uid matches any.
func (c *ResourceClaim) ReservedForPod(name, uid string) bool {
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && r.Name == name && (uid == "" || r.UID == uid) {
			return true
		}
	}
	return false
}

func claimPath(namespace, name string) string {
	return "/apis/" + ResourceGroup + "/" + ResourceVersion + "/namespaces/" + url.PathEscape(namespace) + "/resourceclaims/" + url.PathEscape(name)
}

// GetResourceClaim reads one ResourceClaim with a consistent read: its
// allocation and reservation are recent writes of the scheduler's.
func (c *Client) GetResourceClaim(ctx context.Context, namespace, name string) (*ResourceClaim, error) {
	rc := &ResourceClaim{}
	if err := c.do(ctx, "GET", claimPath(namespace, name), "", nil, rc); err != nil {
		return nil, fmt.Errorf("get ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return rc, nil
}

// ResourceSlice is the part of a resource.k8s.io/v1 ResourceSlice that
// manifold reads: a pool's devices and their attributes.
type ResourceSlice struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		Driver string `json:"driver"`
		Pool   struct {
			Name       string `json:"name"`
			Generation int64  `json:"generation"`
		} `json:"pool"`
		NodeName *string       `json:"nodeName,omitempty"`
		Devices  []SliceDevice `json:"devices"`
	} `json:"spec"`
}

// SliceDevice is one device of a ResourceSlice.
type SliceDevice struct {
	Name       string                     `json:"name"`
	Attributes map[string]DeviceAttribute `json:"attributes,omitempty"`
}

// DeviceAttribute is one attribute's value: exactly one field is set.
type DeviceAttribute struct {
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	String  *string `json:"string,omitempty"`
	Version *string `json:"version,omitempty"`
}

// Value is the attribute's value as a plugin's config holds it: a string,
// a number or a bool; nil for a kind manifold does not hand on (lists).
func (a DeviceAttribute) Value() any {
	switch {
	case a.String != nil:
		return *a.String
	case a.Version != nil:
		return *a.Version
	case a.Int != nil:
		return *a.Int
	case a.Bool != nil:
		return *a.Bool
	}
	return nil
}

// sliceList is a page of ResourceSlices.
type sliceList struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []ResourceSlice `json:"items"`
}

// ListResourceSlices lists the ResourceSlices of driver, only those of
// nodeName when it is set (the API server indexes slices by node), from
// the API server's watch cache: a device allocated to a running pod was
// published long before.
func (c *Client) ListResourceSlices(ctx context.Context, driver, nodeName string) ([]ResourceSlice, error) {
	sel := "spec.driver=" + driver
	if nodeName != "" {
		sel += ",spec.nodeName=" + nodeName
	}
	q := url.Values{"fieldSelector": {sel}, "resourceVersion": {"0"}, "limit": {strconv.Itoa(500)}}
	var out []ResourceSlice
	for {
		var page sliceList
		path := "/apis/" + ResourceGroup + "/" + ResourceVersion + "/resourceslices?" + q.Encode()
		if err := c.do(ctx, "GET", path, "", nil, &page); err != nil {
			return nil, fmt.Errorf("list ResourceSlices of driver %s: %w", driver, err)
		}
		out = append(out, page.Items...)
		if page.Metadata.Continue == "" {
			return out, nil
		}
		// A continued list is served from etcd at the first page's version.
		q.Set("continue", page.Metadata.Continue)
		q.Del("resourceVersion")
	}
}
