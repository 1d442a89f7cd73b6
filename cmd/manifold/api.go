package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// Annotation keys (DESIGN §3, §4, §8).
const (
	annotNetworks       = "k8s.v1.cni.cncf.io/networks"
	annotNetworkStatus  = "k8s.v1.cni.cncf.io/network-status"
	annotDefaultNetwork = "v1.multus-cni.io/default-network"
	annotConfigSource   = "kubernetes.io/config.source"
)

// podAPI is what ADD needs from the API server; *k8sclient.Client in production.
type podAPI interface {
	WaitForPod(ctx context.Context, namespace, name string, wait time.Duration) (*k8sclient.Pod, error)
	GetNAD(ctx context.Context, namespace, name string) (*k8sclient.NetworkAttachmentDefinition, error)
	PatchPodAnnotation(ctx context.Context, namespace, name, key, value string) error
	Event(ctx context.Context, pod *k8sclient.Pod, eventType, reason, message, host string, now time.Time) error
}

// nadCache reads each distinct NAD once per call, however often the pod names it
// (DESIGN: at most one read per distinct NAD).
type nadCache struct {
	api  podAPI
	seen map[string]*k8sclient.NetworkAttachmentDefinition
}

func newNADCache(api podAPI) *nadCache {
	return &nadCache{api: api, seen: map[string]*k8sclient.NetworkAttachmentDefinition{}}
}

// NADConfig implements nadSource.
func (c *nadCache) NADConfig(ctx context.Context, namespace, name string) (string, bool, error) {
	key := namespace + "/" + name
	if nad, ok := c.seen[key]; ok {
		if nad == nil {
			return "", false, nil
		}
		return nad.Spec.Config, true, nil
	}
	nad, err := c.api.GetNAD(ctx, namespace, name)
	if errors.Is(err, k8sclient.ErrNotFound) {
		c.seen[key] = nil
		return "", false, nil
	}
	if err != nil {
		return "", false, apiError(err)
	}
	c.seen[key] = nad
	return nad.Spec.Config, true, nil
}

// apiError maps an API failure to its CNI code: 11 when the server could not be
// reached in time (the runtime will retry), 7 otherwise (a forbidden or malformed
// answer will not fix itself).
func apiError(err error) error {
	if errors.Is(err, k8sclient.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return netconf.TryAgainLater("%v", err)
	}
	return netconf.Invalid("%v", err)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
