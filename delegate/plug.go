package delegate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// ErrNoRecord is BeginChange's answer for a container with no record: it was
// never attached by manifold, or its DEL has run (and so wins over a change).
var ErrNoRecord = errors.New("no scratch record for the container")

// Change is one step of a hot-plug on a running container (docs/hotplug.md):
// one attachment added or removed, under the container's lock, so that it is
// serialised with the container's ADD, DEL and CHECK. The record is written
// ahead of every delegate, as in Add and Del, so that a crash at any point
// leaves what DEL or GC needs to undo it.
type Change struct {
	r *Runner
	l *scratch.Lock
	// Record is the container's record as the change found it, and as each
	// step leaves it.
	Record *scratch.Record
}

// BeginChange takes the container's lock and reads its record. The caller
// ends the change with End.
func (r *Runner) BeginChange(ctx context.Context, containerID string) (*Change, error) {
	l, err := r.lock(ctx, containerID)
	if err != nil {
		return nil, err
	}
	if err := r.endLeftovers(l, containerID); err != nil {
		r.Log.Warn("processes that a killed call on this container left running are still there", "error", err)
	}
	r.Prestart.noteGroupsIn(l.Groups())
	rec, err := r.Store.Load(containerID)
	if err == nil && rec == nil {
		// No lock file is left for a container that is gone, as after DEL.
		l.Unlock(true)
		return nil, ErrNoRecord
	}
	if err != nil {
		l.Unlock(false)
		return nil, err
	}
	return &Change{r: r, l: l, Record: rec}, nil
}

// End releases the container's lock.
func (c *Change) End() { c.l.Unlock(false) }

// Attach adds att to the running container. It is saved in the record before
// its delegate runs. When the delegate fails, its DEL runs (it may have
// half-attached) and it leaves the record again, and the container keeps
// what it had; only a DEL that fails too leaves it recorded, for the pod's
// DEL or GC to finish.
func (c *Change) Attach(ctx context.Context, att netconf.Attachment) (types.Result, error) {
	ctx = withGroupLog(ctx, c.l)
	rec := c.Record
	if rec.NetNS == "" || netnsGone(rec.NetNS) {
		return nil, fmt.Errorf("add network %s as %s: the container's network namespace %q is gone", att.DisplayName(), att.IfName, rec.NetNS)
	}
	if i := c.index(att.IfName); i >= 0 {
		return nil, netconf.Invalid("add network %s as %s: interface %s is already taken by network %s", att.DisplayName(), att.IfName, att.IfName, rec.Attachments[i].DisplayName())
	}
	rec.Attachments = append(rec.Attachments, att)
	if err := c.r.Store.Save(rec); err != nil {
		rec.Attachments = rec.Attachments[:len(rec.Attachments)-1]
		return nil, saveError(err)
	}
	last := &rec.Attachments[len(rec.Attachments)-1]
	res, err := c.r.addOne(ctx, rec, last)
	if err == nil {
		return res, nil
	}
	if derr := c.r.delBounded(ctx, rec, last, c.r.Store.Path(rec.ContainerID)); derr != nil {
		// Recorded still: the pod's DEL, or GC, tries again.
		return nil, fmt.Errorf("%w; and its rollback failed, so it stays recorded for the pod's DEL: %v", err, derr)
	}
	rec.Attachments = rec.Attachments[:len(rec.Attachments)-1]
	if serr := c.r.Store.Save(rec); serr != nil {
		c.r.Log.Warn("remove a rolled-back attachment from the record; the pod's DEL will delete it again", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName, "error", serr)
	}
	return nil, err
}

// Detach removes the attachment on ifName from the running container: its
// delegates' DEL first, then its entry in the record, so that a DEL that
// fails, or a crash, leaves it recorded for the pod's DEL or GC.
func (c *Change) Detach(ctx context.Context, ifName string) error {
	ctx = withGroupLog(ctx, c.l)
	i := c.index(ifName)
	if i < 0 {
		return nil
	}
	rec := c.Record
	if rec.Attachments[i].IsDefault {
		return netconf.Invalid("remove %s: it is the pod's default network", ifName)
	}
	if err := c.r.delBounded(ctx, c.delView(), &rec.Attachments[i], c.r.Store.Path(rec.ContainerID)); err != nil {
		return err
	}
	if c.r.Released != nil {
		c.r.Released(ctx, rec, []netconf.Attachment{rec.Attachments[i]})
	}
	rec.Attachments = slices.Delete(rec.Attachments, i, i+1)
	return c.r.Store.Save(rec)
}

// delView is the record as a DEL sees it: with no netns when it is gone.
func (c *Change) delView() *scratch.Record {
	if !netnsGone(c.Record.NetNS) {
		return c.Record
	}
	v := *c.Record
	v.NetNS = ""
	return &v
}

func (c *Change) index(ifName string) int {
	return slices.IndexFunc(c.Record.Attachments, func(a netconf.Attachment) bool { return a.IfName == ifName })
}

// Results are the delegates' results of each recorded attachment, in order,
// from libcni's cache (nil where there is none), for the pod's network-status.
func (c *Change) Results() []types.Result {
	out := make([]types.Result, len(c.Record.Attachments))
	for i := range c.Record.Attachments {
		att := &c.Record.Attachments[i]
		list, err := confList(att)
		if err != nil {
			continue
		}
		res, err := c.r.CNI.GetNetworkListCachedResult(list, runtimeConf(c.Record, att))
		if err != nil {
			c.r.Log.Warn("read the cached result of an attachment", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName, "error", err)
			continue
		}
		out[i] = res
	}
	return out
}
