package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
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
// It must be safe for concurrent use: NAD reads, the status patch and the events
// go out together (docs/performance.md).
type podAPI interface {
	WaitForPod(ctx context.Context, namespace, name, uid string, wait time.Duration) (*k8sclient.Pod, error)
	GetNAD(ctx context.Context, namespace, name string) (*k8sclient.NetworkAttachmentDefinition, error)
	PatchPodAnnotation(ctx context.Context, namespace, name, key, value string) error
	Event(ctx context.Context, pod *k8sclient.Pod, eventType, reason, message, host string, now time.Time) error
}

// nadCache reads each distinct NAD once per call, however often the pod names it
// (DESIGN: at most one read per distinct NAD).
type nadCache struct {
	api  podAPI
	seen map[string]*k8sclient.NetworkAttachmentDefinition
	// failed holds the errors of prefetched reads, so the ordered lookup
	// reports them without reading again.
	failed map[string]error
}

func newNADCache(api podAPI) *nadCache {
	return &nadCache{api: api, seen: map[string]*k8sclient.NetworkAttachmentDefinition{}, failed: map[string]error{}}
}

// NADConfig implements nadSource.
func (c *nadCache) NADConfig(ctx context.Context, namespace, name string) (string, bool, error) {
	key := namespace + "/" + name
	if err, ok := c.failed[key]; ok {
		return "", false, apiError(err)
	}
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

// prefetch reads the distinct NADs that sels name all at once, so a pod with n
// networks waits for one round trip to the API server instead of n. It stops at
// the first selection that namespaceIsolation forbids, where the ordered lookup
// will stop too, so no NAD is read that would not have been read anyway. The
// ordered lookup then finds every answer, error or not, in the cache.
func (c *nadCache) prefetch(ctx context.Context, conf *netconf.Config, podNamespace string, sels []netconf.NetworkSelection) {
	if c == nil {
		return
	}
	var keys []nadKey
	for i := range sels {
		if checkIsolation(conf, podNamespace, &sels[i], false) != nil {
			break
		}
		keys = append(keys, nadKey{sels[i].Namespace, sels[i].Name})
	}
	if len(keys) < 2 {
		return // one read gains nothing from running early
	}
	c.fetch(ctx, keys)
}

// nadKey names a NAD: namespace and name.
type nadKey [2]string

func (k nadKey) String() string { return k[0] + "/" + k[1] }

// staticNADKeys are the NADs that staticNetworks will look up: clusterNetwork
// and defaultNetworks entries given as names (not paths), in the system
// namespace. They do not depend on the pod, so they are read while the pod is.
func staticNADKeys(conf *netconf.Config, podNamespace string) []nadKey {
	var keys []nadKey
	add := func(ref string) {
		if ref = strings.TrimSpace(ref); ref != "" && !strings.Contains(ref, "/") {
			keys = append(keys, nadKey{conf.MultusNamespace, ref})
		}
	}
	add(conf.ClusterNetwork)
	if podNamespace == "" || !conf.IsSystemNamespace(podNamespace) {
		for _, ref := range conf.DefaultNetworks {
			add(ref)
		}
	}
	return keys
}

// fetch reads the NADs in keys that are not cached yet, all at once, and caches
// every answer. It must not run concurrently with other uses of c.
func (c *nadCache) fetch(ctx context.Context, keys []nadKey) {
	var todo []nadKey
	queued := map[nadKey]bool{}
	for _, k := range keys {
		_, seen := c.seen[k.String()]
		_, failed := c.failed[k.String()]
		if seen || failed || queued[k] {
			continue
		}
		queued[k] = true
		todo = append(todo, k)
	}
	nads := make([]*k8sclient.NetworkAttachmentDefinition, len(todo))
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, k := range todo {
		wg.Go(func() { nads[i], errs[i] = c.api.GetNAD(ctx, k[0], k[1]) })
	}
	wg.Wait()
	for i, k := range todo {
		switch {
		case errs[i] == nil:
			c.seen[k.String()] = nads[i]
		case errors.Is(errs[i], k8sclient.ErrNotFound):
			c.seen[k.String()] = nil
		default:
			c.failed[k.String()] = errs[i]
		}
	}
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
