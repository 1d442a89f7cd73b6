package delegate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// GCRequest is what GC knows from the runtime and the config.
type GCRequest struct {
	// Valid is cni.dev/valid-attachments as the runtime gave it.
	Valid []types.GCAttachment
	// Default is the node's default network (clusterNetwork or delegates[0]);
	// nil when it could not be resolved.
	Default *netconf.Attachment
	// Static are the other networks every pod gets (inline delegates after the
	// first, defaultNetworks).
	Static []netconf.Attachment
	// CNIVersion is manifold's own, for Multus's records (DelRequest).
	CNIVersion string
}

// GC removes every attachment that does not belong to a valid container
// (DESIGN §7), and never one that does, whatever manifold can or cannot read
// about that container.
//
// First, each container that manifold knows of (a record, an entry in the
// libcni cache, or what a killed call left: a temp record, a process-group
// note) and that the runtime does not list gets a full DEL, each
// attachment with its own config, and loses its record. This covers an ADD
// that crashed part-way, whose record was written before its first delegate
// ran. A container the runtime lists is never DELed.
//
// Then GC is forwarded to every delegate network that is known (the default
// and static networks, the records of valid containers, the libcni cache),
// once per distinct config: two NADs may share a CNI name and differ in their
// plugins, and each config's plugins get the GC. libcni's GCNetworkList DELs,
// with the config it is given, every cached attachment of that name outside
// the valid set; so the valid set of every call for a name is the union over
// all its configs, and holds every attachment still in the cache (manifold
// has done the DELs itself, each with the right config; what is left is
// either valid or a DEL that failed, for the next GC to retry). It also holds
// the runtime's valid set as given: a valid (container, CNI_IFNAME) is the
// container's default attachment, whatever network that is, and a pod
// attached before manifold (by Multus, say) has only that to show.
//
// Such a pod's other attachments are unknown to manifold: while any valid
// container has neither a record nor a cache entry, GC is forwarded only to
// the default network's name, and the others wait (a warning says so). A
// plugin that frees the addresses of attachments outside the valid set would
// otherwise free addresses that running pods use.
func (r *Runner) GC(ctx context.Context, req GCRequest) error {
	var errs []error
	validIDs := make(map[string]bool, len(req.Valid))
	for _, v := range req.Valid {
		validIDs[v.ContainerID] = true
	}
	ids, err := r.Store.List()
	if err != nil {
		return err
	}
	cached, err := r.CNI.GetCachedAttachments("")
	if err != nil {
		// libcni's GCNetworkList reads the same directory, and DELs nothing
		// when it cannot.
		errs = append(errs, fmt.Errorf("gc: read libcni cache: %w", err))
	}
	stale := map[string]bool{}
	for _, id := range ids {
		if !validIDs[id] {
			stale[id] = true
		}
	}
	// A call killed on a container may have left processes running, or a
	// temp record, and no record (killed while saving the first): its DEL
	// ends and removes them, under the container's lock. Those of a valid
	// container wait for its next call.
	leftovers, err := r.Store.Leftovers()
	if err != nil {
		errs = append(errs, fmt.Errorf("gc: %w", err))
	}
	for _, id := range leftovers {
		if !validIDs[id] {
			stale[id] = true
		}
	}
	for _, c := range cached {
		if validIDs[c.ContainerID] {
			continue
		}
		if scratch.ValidateContainerID(c.ContainerID) != nil {
			// No DEL can name it: it is left, and kept from libcni below.
			errs = append(errs, badCacheEntry(r.Store.Dir, c))
			continue
		}
		stale[c.ContainerID] = true
	}
	// Multus's records (in cniDir and in MultusDir): a container the runtime
	// does not list is DELed whoever attached it; a valid one's attachments
	// count as known and valid below.
	g := newGCNetworks(req.Valid)
	known := map[string]bool{}
	multusStale, multusErrs := r.gcMultus(validIDs, ids, req.CNIVersion, g, known)
	errs = append(errs, multusErrs...)
	for _, id := range multusStale {
		stale[id] = true
	}
	for _, id := range sortedKeys(stale) {
		if err := r.Del(ctx, DelRequest{ContainerID: id, CNIVersion: req.CNIVersion}); err != nil {
			errs = append(errs, fmt.Errorf("gc container %s: %w", id, err))
		}
	}
	r.sweepLocks()

	if req.Default != nil {
		g.add(req.Default)
	}
	for i := range req.Static {
		g.add(&req.Static[i])
	}
	for _, id := range ids {
		if !validIDs[id] {
			continue
		}
		rec, err := r.Store.Load(id)
		if err != nil {
			// Its cache entries stand for it below.
			r.Log.Warn("gc: scratch record of a valid container unusable; its attachments are taken from the libcni cache", "container", id, "error", err)
			continue
		}
		if rec == nil {
			continue
		}
		known[id] = true
		for i := range rec.Attachments {
			g.add(&rec.Attachments[i])
			g.valid(rec.Attachments[i].Network, id, rec.Attachments[i].IfName)
		}
	}
	// The cache again, after the DELs: what they could not delete stays valid.
	cached, err = r.CNI.GetCachedAttachments("")
	if err != nil {
		errs = append(errs, fmt.Errorf("gc: read libcni cache: %w", err))
	}
	for _, c := range cached {
		if lb := badCacheEntry(r.Store.Dir, c); lb != nil {
			// libcni's GC would DEL it with the values it holds: in the
			// valid set of its network, libcni leaves it alone. A stale
			// container's DEL above has named it; a valid one's DEL will.
			g.valid(c.Network, c.ContainerID, c.IfName)
			if validIDs[c.ContainerID] {
				r.Log.Warn("gc: a libcni cache entry of a valid container cannot be run; it is left alone", "error", lb)
			}
			continue
		}
		a := fromCache(c)
		g.add(&a)
		g.valid(c.Network, c.ContainerID, c.IfName)
		known[c.ContainerID] = true
	}

	var unknown []string
	for id := range validIDs {
		if !known[id] {
			unknown = append(unknown, id)
		}
	}
	sort.Strings(unknown)
	var skipped []string
	for _, n := range g.networks() {
		if len(unknown) > 0 && (req.Default == nil || n.att.Network != req.Default.Network) {
			skipped = append(skipped, n.att.DisplayName())
			continue
		}
		list, err := confList(n.att)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.CNI.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: g.validSet(n.att.Network)}); err != nil {
			errs = append(errs, wrapDelegateError(err, "gc network %s", n.att.DisplayName()))
		}
	}
	if len(skipped) > 0 {
		r.Log.Warn("gc: not forwarded to networks other than the default one: some valid containers have no manifold record (attached before manifold, or by Multus), so their attachments to these networks are unknown",
			"networks", strings.Join(skipped, ","), "unknownContainers", len(unknown), "example", unknown[0])
	}
	return errors.Join(errs...)
}

// gcNetworks gathers the networks GC is forwarded to, one per distinct (name,
// config), and the valid attachments of each name.
type gcNetworks struct {
	byKey   map[string]*gcNetwork
	byName  map[string]map[types.GCAttachment]bool
	runtime []types.GCAttachment
}

type gcNetwork struct {
	key string
	att *netconf.Attachment
}

func newGCNetworks(runtimeValid []types.GCAttachment) *gcNetworks {
	return &gcNetworks{byKey: map[string]*gcNetwork{}, byName: map[string]map[types.GCAttachment]bool{}, runtime: runtimeValid}
}

func (g *gcNetworks) add(att *netconf.Attachment) {
	key := att.Network + "\x00" + string(att.Config)
	if _, ok := g.byKey[key]; !ok {
		g.byKey[key] = &gcNetwork{key: key, att: att}
	}
	g.set(att.Network)
}

// set is the valid set of a network name, which starts as the runtime's.
func (g *gcNetworks) set(network string) map[types.GCAttachment]bool {
	if g.byName[network] == nil {
		set := make(map[types.GCAttachment]bool, len(g.runtime))
		for _, v := range g.runtime {
			set[v] = true
		}
		g.byName[network] = set
	}
	return g.byName[network]
}

func (g *gcNetworks) valid(network, containerID, ifName string) {
	g.set(network)[types.GCAttachment{ContainerID: containerID, IfName: ifName}] = true
}

// networks in a stable order.
func (g *gcNetworks) networks() []*gcNetwork {
	out := make([]*gcNetwork, 0, len(g.byKey))
	for _, n := range g.byKey {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// validSet of a network name, sorted.
func (g *gcNetworks) validSet(network string) []types.GCAttachment {
	set := g.byName[network]
	out := make([]types.GCAttachment, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ContainerID != out[j].ContainerID {
			return out[i].ContainerID < out[j].ContainerID
		}
		return out[i].IfName < out[j].IfName
	})
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
