package flow

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
	annotNetworks       = netconf.AnnotNetworks
	annotNetworkStatus  = "k8s.v1.cni.cncf.io/network-status"
	annotDefaultNetwork = netconf.AnnotDefaultNetwork
	annotConfigSource   = "kubernetes.io/config.source"
)

// API is what a call needs from the API server (podAPI).
type API = podAPI

// podAPI is what ADD needs from the API server; *k8sclient.Client in production.
// It must be safe for concurrent use: NAD reads, the status patch and the events
// go out together (docs/performance.md).
type podAPI interface {
	WaitForPod(ctx context.Context, namespace, name, uid string, wait time.Duration) (*k8sclient.Pod, error)
	GetNAD(ctx context.Context, namespace, name string) (*k8sclient.NetworkAttachmentDefinition, error)
	PatchPodAnnotation(ctx context.Context, namespace, name, uid, key, value string) error
	Event(ctx context.Context, pod *k8sclient.Pod, eventType, reason, message, host string, now time.Time) error
	// The DRA reads and writes, for a pod that draws a DRA device
	// (docs/devices.md).
	GetResourceClaim(ctx context.Context, namespace, name string) (*k8sclient.ResourceClaim, error)
	ListResourceSlices(ctx context.Context, driver, nodeName string) ([]k8sclient.ResourceSlice, error)
	ApplyClaimDeviceStatus(ctx context.Context, namespace, name, uid, fieldManager string, devices []k8sclient.DeviceStatus, force bool) error
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
