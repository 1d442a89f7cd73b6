package main

import (
	"context"
	"errors"
	"os"
	"slices"
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

// nadCache reads each NAD at most once per call, and keeps every answer: the
// NAD, ErrNotFound, or the error that stopped the read.
type nadCache struct {
	api     podAPI
	answers map[nadKey]nadAnswer
}

// nadKey names a NAD: namespace and name.
type nadKey [2]string

func (k nadKey) String() string { return k[0] + "/" + k[1] }

type nadAnswer struct {
	nad *k8sclient.NetworkAttachmentDefinition
	err error
}

func newNADCache(api podAPI) *nadCache {
	return &nadCache{api: api, answers: map[nadKey]nadAnswer{}}
}

// NADConfig implements nadSource.
func (c *nadCache) NADConfig(ctx context.Context, namespace, name string) (string, bool, error) {
	k := nadKey{namespace, name}
	c.fetch(ctx, []nadKey{k})
	a := c.answers[k]
	switch {
	case errors.Is(a.err, k8sclient.ErrNotFound):
		return "", false, nil
	case a.err != nil:
		return "", false, apiError(a.err)
	}
	return a.nad.Spec.Config, true, nil
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
	c.fetch(ctx, keys)
}

// fetch reads the NADs in keys that have no answer yet, all at once. It must not
// run concurrently with other uses of c.
func (c *nadCache) fetch(ctx context.Context, keys []nadKey) {
	var todo []nadKey
	for _, k := range keys {
		if _, done := c.answers[k]; !done && !slices.Contains(todo, k) {
			todo = append(todo, k)
		}
	}
	answers := make([]nadAnswer, len(todo))
	var wg sync.WaitGroup
	for i, k := range todo {
		wg.Go(func() { answers[i].nad, answers[i].err = c.api.GetNAD(ctx, k[0], k[1]) })
	}
	wg.Wait()
	for i, k := range todo {
		c.answers[k] = answers[i]
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
