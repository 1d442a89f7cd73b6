package k8sclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Pod holds the fields of a pod that manifold reads.
type Pod struct {
	Namespace   string
	Name        string
	UID         string
	Annotations map[string]string
	// NodeName is the node the pod is bound to.
	NodeName string
	// ResourceClaims are the pod's DRA claims (spec.resourceClaims), each
	// with the name of its ResourceClaim.
	ResourceClaims []PodResourceClaim
	// ExtendedClaim is the ResourceClaim the scheduler made for the pod's
	// extended resources that DRA serves (status.extendedResourceClaimStatus,
	// Kubernetes 1.34+, beta and on by default in 1.36); nil for none.
	ExtendedClaim *ExtendedResourceClaim
}

// ExtendedResourceClaim is a pod's status.extendedResourceClaimStatus: the
// ResourceClaim made for its DRA-backed extended resources, and which
// request of it serves which container's resource.
type ExtendedResourceClaim struct {
	ClaimName string
	Mappings  []ExtendedResourceRequest
}

// ExtendedResourceRequest is one of its requestMappings.
type ExtendedResourceRequest struct {
	Container, Resource, Request string
}

// PodResourceClaim is one entry of a pod's spec.resourceClaims.
type PodResourceClaim struct {
	// Name is the claim's name in the pod.
	Name string
	// ClaimName is its ResourceClaim: spec's resourceClaimName, or the one
	// made from its template (status.resourceClaimStatuses); "" when there is
	// none (yet).
	ClaimName string
}

type podJSON struct {
	Metadata struct {
		Namespace   string            `json:"namespace"`
		Name        string            `json:"name"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName       string `json:"nodeName"`
		ResourceClaims []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaims"`
	} `json:"spec"`
	Status struct {
		ResourceClaimStatuses []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaimStatuses"`
		ExtendedResourceClaimStatus *struct {
			ResourceClaimName string `json:"resourceClaimName"`
			RequestMappings   []struct {
				ContainerName string `json:"containerName"`
				ResourceName  string `json:"resourceName"`
				RequestName   string `json:"requestName"`
			} `json:"requestMappings"`
		} `json:"extendedResourceClaimStatus"`
	} `json:"status"`
}

// pod keeps what manifold uses of the decoded pod.
func (p *podJSON) pod() *Pod {
	out := &Pod{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, UID: p.Metadata.UID, Annotations: p.Metadata.Annotations, NodeName: p.Spec.NodeName}
	for _, c := range p.Spec.ResourceClaims {
		rc := PodResourceClaim{Name: c.Name, ClaimName: c.ResourceClaimName}
		if rc.ClaimName == "" {
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == c.Name {
					rc.ClaimName = st.ResourceClaimName
				}
			}
		}
		out.ResourceClaims = append(out.ResourceClaims, rc)
	}
	if ext := p.Status.ExtendedResourceClaimStatus; ext != nil && ext.ResourceClaimName != "" {
		out.ExtendedClaim = &ExtendedResourceClaim{ClaimName: ext.ResourceClaimName}
		for _, m := range ext.RequestMappings {
			out.ExtendedClaim.Mappings = append(out.ExtendedClaim.Mappings, ExtendedResourceRequest{Container: m.ContainerName, Resource: m.ResourceName, Request: m.RequestName})
		}
	}
	return out
}

func podPath(namespace, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(name)
}

// GetPod reads one pod with a consistent read (through etcd).
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*Pod, error) {
	return c.getPod(ctx, podPath(namespace, name), namespace, name)
}

// GetPodCached reads one pod from the API server's watch cache
// (resourceVersion=0): no etcd read, and cheaper for the server, but the answer
// may lag the latest write by a moment.
func (c *Client) GetPodCached(ctx context.Context, namespace, name string) (*Pod, error) {
	return c.getPod(ctx, podPath(namespace, name)+"?resourceVersion=0", namespace, name)
}

func (c *Client) getPod(ctx context.Context, path, namespace, name string) (*Pod, error) {
	var p podJSON
	if err := c.do(ctx, "GET", path, "", nil, &p); err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return p.pod(), nil
}

// WaitForPod reads a pod, retrying while it is not found (the kubelet can call
// CNI before the pod is visible through the informer-free API) until wait has
// passed. Any other error returns at once.
//
// When the runtime named the pod's UID, the first read is from the watch cache,
// and it is used only if it holds that very pod. A pod the cache does not have
// yet, or an older pod of the same name (a StatefulSet pod that was replaced),
// falls through to consistent reads, so the cache never makes manifold act on
// a stale pod. Without a UID there is nothing to check a cached answer against,
// so every read is consistent. A pod whose UID legitimately differs (a static
// pod's mirror) costs one extra read.
func (c *Client) WaitForPod(ctx context.Context, namespace, name, uid string, wait time.Duration) (*Pod, error) {
	deadline := time.Now().Add(wait)
	if uid != "" {
		p, err := c.GetPodCached(ctx, namespace, name)
		if err == nil && p.UID == uid {
			return p, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	delay := 50 * time.Millisecond
	for {
		p, err := c.GetPod(ctx, namespace, name)
		remaining := time.Until(deadline)
		if err == nil || !errors.Is(err, ErrNotFound) || remaining <= 0 {
			return p, err
		}
		// The last read happens at the deadline, not a back-off step before
		// it, so a pod that shows up within the wait is found.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(delay, remaining)):
		}
		if delay < 400*time.Millisecond {
			delay *= 2
		}
	}
}

// PatchPodAnnotation sets one annotation with a merge patch on the status
// subresource. A merge patch leaves the pod's other annotations alone, and the
// status subresource lets RBAC grant this without the right to change pod specs.
//
// A non-empty uid makes the patch conditional: the patch carries the pod's UID,
// and the API server refuses it (422: metadata.uid is immutable) when the pod
// of that name is another one, such as a StatefulSet pod's replacement.
func (c *Client) PatchPodAnnotation(ctx context.Context, namespace, name, uid, key, value string) error {
	meta := map[string]any{"annotations": map[string]string{key: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if err := c.do(ctx, "PATCH", podPath(namespace, name)+"/status", "application/merge-patch+json", patch, nil); err != nil {
		return fmt.Errorf("patch annotation %s of pod %s/%s: %w", key, namespace, name, err)
	}
	return nil
}
