package delegate

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
)

// GC removes every attachment that does not belong to a valid container
// (DESIGN §7). valid is manifold's own valid set from the runtime; only the
// container IDs matter, because manifold's single attachment per container stands
// for all of that container's delegates.
//
// First, each recorded container that is not valid gets a full DEL and loses its
// record; this covers an ADD that crashed part-way, whose record was written before
// its first delegate ran. Then GC is forwarded to every delegate network that is
// known (from the records, the libcni cache, and extra, normally the default
// networks), each with its own valid set: the attachments that the valid
// containers' records hold for that network. libcni's GC also DELs cached
// attachments outside that set, which catches anything without a record.
func (r *Runner) GC(ctx context.Context, valid []types.GCAttachment, extra []netconf.Attachment) error {
	validIDs := make(map[string]bool, len(valid))
	for _, v := range valid {
		validIDs[v.ContainerID] = true
	}
	ids, err := r.Store.List()
	if err != nil {
		return err
	}
	var errs []error
	networks := map[string]*netconf.Attachment{}
	perNetwork := map[string][]types.GCAttachment{}
	for _, id := range ids {
		if !validIDs[id] {
			if err := r.Del(ctx, DelRequest{ContainerID: id}); err != nil {
				errs = append(errs, fmt.Errorf("gc container %s: %w", id, err))
			}
			continue
		}
		rec, err := r.Store.Load(id)
		if err != nil || rec == nil {
			continue
		}
		for i := range rec.Attachments {
			a := &rec.Attachments[i]
			networks[a.Network] = a
			perNetwork[a.Network] = append(perNetwork[a.Network], types.GCAttachment{ContainerID: id, IfName: a.IfName})
		}
	}
	cached, err := r.CNI.GetCachedAttachments("")
	if err != nil {
		errs = append(errs, fmt.Errorf("gc: read libcni cache: %w", err))
	}
	for _, c := range cached {
		if _, ok := networks[c.Network]; !ok {
			a := fromCache(c)
			networks[c.Network] = &a
		}
	}
	for i := range extra {
		if _, ok := networks[extra[i].Network]; !ok {
			networks[extra[i].Network] = &extra[i]
		}
	}
	for name, att := range networks {
		list, err := confList(att)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.CNI.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: perNetwork[name]}); err != nil {
			errs = append(errs, wrapDelegateError(err, "gc network %s", att.DisplayName()))
		}
	}
	return errors.Join(errs...)
}
