package flow

import (
	"context"
	"errors"
	"sync"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// nadCache reads each NAD at most once per call, and keeps every answer: the
// NAD, ErrNotFound, or the error that stopped the read. Reads run in the
// background once started; a lookup waits for its own.
//
// In the node daemon it also consults the daemon's memory of earlier reads
// (nadMemory): a network may then be built from the NAD's remembered config
// while its read is still on the way, and the read confirms it before the
// network's delegate runs (speculate, pendingNAD).
type nadCache struct {
	api podAPI
	// mem is the daemon's memory of NADs, kept per kubeconfig; nil in the
	// binary, which keeps nothing between calls.
	mem        *nadMemory
	kubeconfig string

	mu    sync.Mutex
	reads map[nadKey]*nadRead
}

// nadKey names a NAD: namespace and name.
type nadKey [2]string

func (k nadKey) String() string { return k[0] + "/" + k[1] }

// nadRead is one NAD's read: done is closed once nad or err is set.
type nadRead struct {
	done chan struct{}
	nad  *k8sclient.NetworkAttachmentDefinition
	err  error
}

func newNADCache(api podAPI, mem *nadMemory, kubeconfig string) *nadCache {
	return &nadCache{api: api, mem: mem, kubeconfig: kubeconfig, reads: map[nadKey]*nadRead{}}
}

// start begins the reads of keys that have none yet, all at once, and returns
// without waiting for them.
func (c *nadCache) start(ctx context.Context, keys []nadKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if _, ok := c.reads[k]; ok {
			continue
		}
		r := &nadRead{done: make(chan struct{})}
		c.reads[k] = r
		go func() {
			nad, err := c.api.GetNAD(ctx, k[0], k[1])
			// The answer and the memory it changes become visible at
			// once, under c.mu: speculate sees either the memory from
			// before this read, or the read done.
			c.mu.Lock()
			defer c.mu.Unlock()
			r.nad, r.err = nad, err
			c.remember(k, r)
			close(r.done)
		}()
	}
}

// wait returns the answer for k, starting its read if need be.
func (c *nadCache) wait(ctx context.Context, k nadKey) (*k8sclient.NetworkAttachmentDefinition, error) {
	c.start(ctx, []nadKey{k})
	c.mu.Lock()
	r := c.reads[k]
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.nad, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch reads the NADs in keys that have no answer yet, all at once, and waits
// for them.
func (c *nadCache) fetch(ctx context.Context, keys []nadKey) {
	c.start(ctx, keys)
	for _, k := range keys {
		c.wait(ctx, k)
	}
}

// nadDef is what manifold uses of a NAD: its spec.config, and what its
// networks draw a device from (netconf.NADDevices: the device-plugin resource
// or DRA claim of k8s.v1.cni.cncf.io/resourceName, the DRA claim of
// netconf.AnnotResourceClaim, the plugin keys of netconf.AnnotDeviceKeys).
// docs/devices.md.
type nadDef struct {
	config string
	netconf.NADDevices
}

func defOf(nad *k8sclient.NetworkAttachmentDefinition) nadDef {
	return nadDef{config: nad.Spec.Config, NADDevices: netconf.NADDevicesOf(nad.Metadata.Annotations)}
}

// drawsDevice reports whether the NAD's networks draw a device, from a
// device plugin or from DRA.
func (d nadDef) drawsDevice() bool { return d.Resource != "" || d.Claim != "" }

// size is what the daemon's memory counts of a definition.
func (d nadDef) size() int { return len(d.config) + len(d.Resource) + len(d.Claim) + len(d.DeviceKeys) }

// drawFrom sets on att what its NAD draws a device from. Annotations that
// netconf.NADDevices.Check refuses (a source named twice, a malformed
// resource, claim or device keys) fail the network with code 7.
func (d nadDef) drawFrom(att *netconf.Attachment) error {
	keys, err := d.Check(att.DisplayName())
	if err != nil {
		return err
	}
	att.Resource, att.ResourceClaim, att.DeviceKeys = d.Resource, d.Claim, keys
	return nil
}

// NAD implements nadSource: it waits for the NAD's read.
func (c *nadCache) NAD(ctx context.Context, namespace, name string) (nadDef, bool, error) {
	nad, err := c.wait(ctx, nadKey{namespace, name})
	switch {
	case errors.Is(err, k8sclient.ErrNotFound):
		return nadDef{}, false, nil
	case err != nil:
		return nadDef{}, false, apiError(err)
	}
	return defOf(nad), true, nil
}

// prefetch starts the reads of the distinct NADs that sels name, so a pod with
// n networks waits for one round trip to the API server instead of n. It stops
// at the first selection that namespaceIsolation forbids, where the ordered
// lookup will stop too, so no NAD is read that would not have been read
// anyway. The ordered lookup then finds every answer, error or not, here.
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
	c.start(ctx, keys)
}

// prefetchRequest starts the reads of the NADs that the pod's annotations
// name: the default-network override, then the networks (prefetch). An
// annotation that did not parse, or an override that namespaceIsolation
// forbids, is left for podNetworks to report, and stops the prefetch there.
func (c *nadCache) prefetchRequest(ctx context.Context, conf *netconf.Config, podNamespace string, req *podRequest) {
	if c == nil || req.OverrideErr != nil {
		return
	}
	if sel := req.Override; sel != nil {
		if checkIsolation(conf, podNamespace, sel, true) != nil {
			return
		}
		c.start(ctx, []nadKey{{sel.Namespace, sel.Name}})
	}
	if req.NetworksErr == nil {
		c.prefetch(ctx, conf, podNamespace, req.Networks)
	}
}

// speculate returns the config the daemon remembers for k while k's read is
// still on the way. ok is false when the read has already answered (its answer
// is what counts), outside the daemon, and for a NAD the daemon has not read
// successfully before.
func (c *nadCache) speculate(k nadKey) (def nadDef, ok bool) {
	if c.mem == nil {
		return nadDef{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.reads[k]; r != nil {
		select {
		case <-r.done:
			return nadDef{}, false
		default:
		}
	}
	return c.mem.get(c.kubeconfig, k)
}

// remember keeps a successful read's config in the daemon's memory, and drops
// the NAD after any failed one: a NAD that is gone, or an API server that does
// not answer, is not speculated on again until a read succeeds, so a pod that
// the runtime retries does not attach and detach its default network each time.
func (c *nadCache) remember(k nadKey, r *nadRead) {
	if c.mem == nil {
		return
	}
	if r.err != nil {
		c.mem.forget(c.kubeconfig, k)
		return
	}
	c.mem.put(c.kubeconfig, k, defOf(r.nad))
}

// nadMemory is the node daemon's memory of the NADs it has read: the config
// that the last successful read of each returned. NADs change rarely and many
// pods use the same few, so a pod's networks can nearly always be built from
// it while their reads are on the way (docs/performance-history.md, change 13).
type nadMemory struct {
	mu      sync.Mutex
	configs map[nadMemoryKey]nadDef
	bytes   int // the definitions' total size
}

type nadMemoryKey struct {
	kubeconfig string
	nad        nadKey
}

// Bounds on the memory: the number of NADs and their configs' total size.
// When either would be passed, it starts again empty. A config larger than
// netconf.MaxConfigBytes, which no network can be built from, is not kept.
const (
	nadMemoryMax      = 4096
	nadMemoryMaxBytes = 64 << 20
)

func (m *nadMemory) get(kubeconfig string, k nadKey) (nadDef, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cfg, ok := m.configs[nadMemoryKey{kubeconfig, k}]
	return cfg, ok
}

func (m *nadMemory) put(kubeconfig string, k nadKey, def nadDef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := nadMemoryKey{kubeconfig, k}
	m.dropLocked(key)
	if len(def.config) > netconf.MaxConfigBytes {
		return
	}
	if m.configs == nil || len(m.configs) >= nadMemoryMax || m.bytes+def.size() > nadMemoryMaxBytes {
		m.configs, m.bytes = map[nadMemoryKey]nadDef{}, 0
	}
	m.configs[key] = def
	m.bytes += def.size()
}

func (m *nadMemory) forget(kubeconfig string, k nadKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(nadMemoryKey{kubeconfig, k})
}

func (m *nadMemory) dropLocked(key nadMemoryKey) {
	if old, ok := m.configs[key]; ok {
		m.bytes -= old.size()
		delete(m.configs, key)
	}
}

// pendingNAD is a network built from the daemon's memory of its NAD while the
// NAD's read was on the way: its position in the pod's delegate list, the
// selection, and the remembered config it was built from.
type pendingNAD struct {
	index int
	sel   netconf.NetworkSelection
	def   nadDef
}

// confirm is the runner's Confirm for a pod with pending networks. Before the
// delegate of such a network runs, it waits for the NAD's read (which has
// nearly always answered by then, while the delegates before it ran). When
// the read returned the remembered config, the network runs as recorded. When
// the NAD has changed, the network is built again from the read, and the
// runner records it before it runs it. When the NAD is gone or the read
// failed, the ADD fails with the error that it would have failed with before
// any delegate ran, and the runner undoes the networks attached so far.
func (pc *podContext) confirm(c *call) func(context.Context, int, *netconf.Attachment) (*netconf.Attachment, error) {
	return func(ctx context.Context, i int, recorded *netconf.Attachment) (*netconf.Attachment, error) {
		for _, p := range pc.pending {
			if p.index != i {
				continue
			}
			def, found, err := pc.nads.NAD(ctx, p.sel.Namespace, p.sel.Name)
			if err != nil {
				return nil, err
			}
			if found && def == p.def {
				return nil, nil
			}
			att, err := attachmentFor(c.log, c.conf, p.sel, def, found)
			if err != nil {
				return nil, err
			}
			att.IfName = recorded.IfName
			if def.drawsDevice() {
				// Devices were handed out before the first delegate ran.
				return nil, netconf.TryAgainLater("network %s: its NAD changed while the pod was being attached, and now draws a device (%s); the next ADD reads it afresh", att.DisplayName(), deviceSource(&att))
			}
			c.log.Info("NAD changed since the daemon last read it; network recorded again before its delegate runs", "network", att.DisplayName(), delegate.AttachmentIfnameKey, att.IfName)
			return &att, nil
		}
		return nil, nil
	}
}
