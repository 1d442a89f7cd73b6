package delegate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// DelRequest is what DEL knows from the runtime.
type DelRequest struct {
	ContainerID string
	NetNS       string
	// IfName is CNI_IFNAME; with no record it tells which cached attachment is the
	// default network, which is deleted last.
	IfName      string
	RuntimeArgs [][2]string
	// Fallback, when set, gives what to DEL when nothing is known about the
	// container: no usable record and no libcni cache entry. That is a pod
	// attached before manifold (by Multus, or while manifold's config was
	// absent), or a second DEL. It returns the node's default network as
	// the config names it, with IfName set, or nil when that cannot be
	// resolved. The CNI spec requires DEL to be idempotent, so a DEL of a
	// network that holds nothing for the container is safe.
	Fallback func(ctx context.Context) *netconf.Attachment
}

// Del detaches everything attached to a container, in reverse order, and keeps
// going past failures so one broken delegate cannot strand the others.
//
// It works from the scratch record; with no record, or a damaged one, or one of
// a format version this manifold cannot read, it works from the libcni cache of
// the delegates' results, which libcni writes after every successful ADD of a
// delegate. With neither, it DELs what req.Fallback gives (the default
// network), or nothing.
//
// It returns an error only when a delegate's DEL failed: a retry by the runtime can
// then help, because the failed delegate's cache entry survives (libcni removes it
// only on success), and with retryDeleteOnError the record survives too. A
// record of an unknown version survives such a failure too: a manifold of its
// version can still read it.
func (r *Runner) Del(ctx context.Context, req DelRequest) error {
	l, err := r.lock(ctx, req.ContainerID)
	if err != nil {
		return err
	}
	rec, loadErr := r.Store.Load(req.ContainerID)
	unknownVersion := errors.Is(loadErr, scratch.ErrUnknownVersion)
	switch {
	case unknownVersion:
		// Written by another manifold (an upgrade rolled back, say). The cache
		// holds every delegate whose ADD succeeded; one whose ADD did not
		// finish is in the record only, which this manifold cannot read.
		r.Log.Warn("scratch record is of a format version this manifold cannot read; deleting every attachment in the libcni cache, then the record", "error", loadErr)
		rec = nil
	case loadErr != nil:
		r.Log.Warn("scratch record unusable, deleting from the libcni cache", "error", loadErr)
		rec = nil
	}
	if rec == nil {
		rec = &scratch.Record{ContainerID: req.ContainerID, RuntimeArgs: req.RuntimeArgs}
	}
	// The runtime's netns is the current truth; GC sends none, and then the
	// recorded one is the best we know.
	if req.NetNS != "" {
		rec.NetNS = req.NetNS
	}
	if netnsGone(rec.NetNS) {
		rec.NetNS = ""
	}

	atts := rec.Attachments
	cached, cacheErr := r.cachedAttachments(req.ContainerID, req.IfName)
	if cacheErr != nil {
		r.Log.Warn("read libcni cache", "error", cacheErr)
	}
	// Anything the cache knows that the record does not (a damaged record, or a
	// record that is missing) is deleted too, after the recorded ones.
	atts = append(missingFrom(atts, cached), atts...)
	if len(atts) == 0 && req.Fallback != nil {
		if att := req.Fallback(ctx); att != nil {
			r.Log.Info("nothing recorded or cached for the container; deleting the default network as the config names it", "network", att.DisplayName())
			atts = []netconf.Attachment{*att}
		}
	}

	// In reverse order of attachment.
	order := make([]*netconf.Attachment, 0, len(atts))
	for i := len(atts) - 1; i >= 0; i-- {
		order = append(order, &atts[i])
	}
	r.expect("DEL", rec, order)
	defer r.Prestart.Close()
	var errs []error
	for _, att := range order {
		if err := r.delBounded(ctx, rec, att); err != nil {
			errs = append(errs, err)
		}
	}
	keep := r.RetryDeleteOnError && loadErr == nil && len(rec.Attachments) > 0
	if len(errs) > 0 && (keep || unknownVersion) {
		l.Unlock(false)
		return errors.Join(errs...)
	}
	if err := r.Store.Remove(req.ContainerID); err != nil {
		errs = append(errs, err)
	}
	l.Unlock(len(errs) == 0)
	return errors.Join(errs...)
}

// delBounded is delOne with a budget of its own (undoContext).
func (r *Runner) delBounded(ctx context.Context, rec *scratch.Record, att *netconf.Attachment) error {
	dctx, cancel := r.undoContext(ctx)
	defer cancel()
	return r.delOne(dctx, rec, att)
}

func (r *Runner) delOne(ctx context.Context, rec *scratch.Record, att *netconf.Attachment) error {
	list, err := confList(att)
	if err != nil {
		// A config we cannot parse cannot be retried into parsing either.
		r.Log.Error("skip delete of unparseable network", "network", att.DisplayName(), "error", err)
		return nil
	}
	r.Log.Debug("delegate del", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName)
	if err := r.CNI.DelNetworkList(ctx, list, runtimeConf(rec, att)); err != nil {
		return wrapDelegateError(err, "delete network %s from %s", att.DisplayName(), att.IfName)
	}
	// The attachment's Device Info file goes with it (the record names it;
	// nothing is asked of the kubelet).
	if f := att.DeviceInfoFile; f != "" {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete network %s from %s: remove its device info file: %w", att.DisplayName(), att.IfName, err)
		}
	}
	return nil
}

// cachedAttachments turns the libcni cache entries of a container into
// attachments, the default network (ifname) last so that it is deleted last.
func (r *Runner) cachedAttachments(containerID, ifName string) ([]netconf.Attachment, error) {
	cached, err := r.CNI.GetCachedAttachments(containerID)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(cached, func(i, j int) bool {
		return cached[i].IfName == ifName && cached[j].IfName != ifName
	})
	atts := make([]netconf.Attachment, 0, len(cached))
	for _, c := range cached {
		atts = append(atts, fromCache(c))
	}
	return atts, nil
}

func fromCache(c *libcni.NetworkAttachment) netconf.Attachment {
	a := netconf.Attachment{Network: c.Network, IfName: c.IfName, Config: c.Config, RuntimeConfig: c.CapabilityArgs}
	// The cached args are the ADD's full CNI_ARGS; DelegateArgs adds IgnoreUnknown
	// again, so drop it here rather than send it twice.
	for _, kv := range c.CniArgs {
		if kv[0] != "IgnoreUnknown" {
			a.CNIArgs = append(a.CNIArgs, kv)
		}
	}
	return a
}

// missingFrom returns the cached attachments that the recorded list lacks.
func missingFrom(recorded, cached []netconf.Attachment) []netconf.Attachment {
	seen := make(map[[2]string]bool, len(recorded))
	for _, a := range recorded {
		seen[[2]string{a.Network, a.IfName}] = true
	}
	var out []netconf.Attachment
	for _, c := range cached {
		if !seen[[2]string{c.Network, c.IfName}] {
			out = append(out, c)
		}
	}
	return out
}
