package delegate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

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
	// CNIVersion is manifold's own cniVersion, given to a config of Multus's
	// that has none, as Multus did.
	CNIVersion string
}

// Del detaches everything attached to a container, in reverse order, and keeps
// going past failures so one broken delegate cannot strand the others.
//
// It works from the scratch record; with no record, or a damaged one, or one of
// a format version this manifold cannot read, it works from the libcni cache of
// the delegates' results, which libcni writes after every successful ADD of a
// delegate. Where manifold has no usable record, it reads Multus's (in
// cniDir, then in MultusDir) and DELs what Multus attached (delMultus). With
// none of these, it DELs what req.Fallback gives (the default network), or
// nothing.
//
// It returns an error only when a delegate's DEL failed: a retry by the runtime can
// then help, because the failed delegate's cache entry survives (libcni removes it
// only on success), and with retryDeleteOnError the record survives too. A
// record of an unknown version survives such a failure too: a manifold of its
// version can still read it. An attachment that is known and cannot be
// deleted (no config that parses) fails DEL too, after everything else was
// deleted, with a LeftBehindError, and the file that names it is kept.
func (r *Runner) Del(ctx context.Context, req DelRequest) error {
	l, err := r.lock(ctx, req.ContainerID)
	if err != nil {
		return err
	}
	// What a call on the container that was killed left: the processes
	// its delegates started, and the temp file of a record it was saving.
	// A process that a kill did not end fails the DEL, after the rest, so
	// that the runtime tries again.
	leftErr := r.endLeftovers(l, req.ContainerID)
	ctx = r.noteIn(ctx, l)
	if err := r.Store.RemoveTemp(req.ContainerID); err != nil {
		leftErr = errors.Join(leftErr, err)
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
	var foreignErrs []error
	foreign := false
	if rec == nil && !unknownVersion {
		for _, dir := range r.multusDirs() {
			found, err := r.delMultus(ctx, req, dir)
			if err != nil {
				foreignErrs = append(foreignErrs, err)
			}
			if found && dir == r.Store.Dir {
				// Multus's record in manifold's own cniDir: its cache is
				// manifold's cache, and delMultus did all there is.
				err = errors.Join(err, leftErr)
				r.Prestart.Close()
				l.Unlock(err == nil)
				return err
			}
			foreign = foreign || found
		}
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
	// The first DEL is that of the last recorded attachment whatever the
	// cache holds (what only the cache knows is deleted after the recorded
	// ones): its process starts now, while the cache is read, and the whole
	// plan is made below (Expect keeps a process that its first call fits).
	if n := len(rec.Attachments); n > 0 {
		r.expect("DEL", rec, []*netconf.Attachment{&rec.Attachments[n-1]})
	}

	atts := rec.Attachments
	// A cache that cannot be read may hold attachments that the record does
	// not (a torn record, or none): DEL goes on with what it knows, and then
	// fails, so that the runtime tries again (libcni reads only the
	// directory here; entries it cannot read are skipped, not errors).
	cached, badCached, cacheErr := r.cachedAttachments(req.ContainerID, req.IfName)
	if cacheErr != nil {
		cacheErr = fmt.Errorf("read the libcni cache of container %s in %s: %w", req.ContainerID, r.Store.Dir, cacheErr)
	}
	// A recorded config that does not parse is taken from the cache, when the
	// cache has it.
	atts = fillFromCache(atts, cached)
	// Anything the cache knows that the record does not (a damaged record, or a
	// record that is missing) is deleted too, after the recorded ones.
	extra := missingFrom(atts, cached)
	files := make([]string, 0, len(extra)+len(atts))
	for i := range extra {
		files = append(files, cacheFile(r.Store.Dir, req.ContainerID, &extra[i]))
	}
	for range atts {
		files = append(files, r.Store.Path(req.ContainerID))
	}
	atts = append(extra, atts...)
	if len(atts) == 0 && !foreign && req.Fallback != nil {
		if att := req.Fallback(ctx); att != nil {
			r.Log.Debug("nothing recorded or cached for the container (the runtime's second DEL, or a pod from before manifold); deleting the default network as the config names it", "network", att.DisplayName())
			atts = []netconf.Attachment{*att}
			files = []string{"the config (fallback)"}
		}
	}

	order := reversed(atts)
	r.expect("DEL", rec, order)
	defer r.Prestart.Close()
	var errs []error
	var released []netconf.Attachment
	leftInRecord := false
	for i, att := range order {
		file := files[len(atts)-1-i]
		if err := r.delBounded(ctx, rec, att, file); err != nil {
			errs = append(errs, err)
			var lb *LeftBehindError
			leftInRecord = leftInRecord || (errors.As(err, &lb) && file == r.Store.Path(req.ContainerID))
			continue
		}
		if file == r.Store.Path(req.ContainerID) {
			released = append(released, *att)
		}
	}
	if r.Released != nil && len(released) > 0 {
		r.Released(ctx, rec, released)
	}
	// Cache entries that cannot be run are left as they are, and named.
	errs = append(errs, badCached...)
	if leftErr != nil {
		errs = append(errs, leftErr)
	}
	// A record that names an attachment left behind is kept: it is what
	// tells the admin, and every retry, about it.
	keep := (r.RetryDeleteOnError && loadErr == nil && len(rec.Attachments) > 0) || leftInRecord
	// No process started early outlives the lock: its note would.
	r.Prestart.Close()
	if len(errs) > 0 && (keep || unknownVersion) {
		l.Unlock(false)
		return errors.Join(append(foreignErrs, errs...)...)
	}
	if err := r.Store.Remove(req.ContainerID); err != nil {
		errs = append(errs, err)
	}
	errs = append(foreignErrs, errs...)
	if cacheErr != nil {
		errs = append(errs, cacheErr)
	}
	l.Unlock(len(errs) == 0)
	if len(errs) == 0 {
		r.sweepLocks()
	}
	return errors.Join(errs...)
}

// sweepLocks removes the lock files that processes killed while holding them
// left for containers with no record (scratch.SweepLocks), after a DEL that
// succeeded: DELs come often enough on a node, and are not what a pod's start
// waits for.
func (r *Runner) sweepLocks() {
	if n := r.Store.SweepLocks(); n > 0 {
		r.Log.Debug("removed the lock files of containers with no record and no call in progress, left by processes killed while they held them", "count", n)
	}
}

// reversed lists atts in reverse order of attachment: the order of DEL.
func reversed(atts []netconf.Attachment) []*netconf.Attachment {
	order := make([]*netconf.Attachment, 0, len(atts))
	for i := len(atts) - 1; i >= 0; i-- {
		order = append(order, &atts[i])
	}
	return order
}

// delBounded is delOne with a budget of its own (undoContext). file is the
// record or cache entry the attachment comes from, for a LeftBehindError.
func (r *Runner) delBounded(ctx context.Context, rec *scratch.Record, att *netconf.Attachment, file string) error {
	dctx, cancel := r.undoContext(ctx)
	defer cancel()
	return r.delOne(dctx, rec, att, file)
}

// delOne DELs one attachment. A config that does not parse cannot be retried
// into parsing: it is a LeftBehindError, never a silent success.
func (r *Runner) delOne(ctx context.Context, rec *scratch.Record, att *netconf.Attachment, file string) error {
	return r.delWith(ctx, r.CNI, rec, att, file)
}

// delWith is delOne with another libcni (Multus's cache dir). file names the
// record or the cache entry the attachment was read from.
func (r *Runner) delWith(ctx context.Context, cni libcni.CNI, rec *scratch.Record, att *netconf.Attachment, file string) error {
	list, err := confList(att)
	if err != nil {
		return &LeftBehindError{Network: att.DisplayName(), IfName: att.IfName, ContainerID: rec.ContainerID, File: file, Reason: strings.TrimPrefix(err.Error(), "parse config of network "+att.DisplayName()+": ")}
	}
	if err := cacheKeys(rec.ContainerID, list.Name, att.IfName); err != nil {
		return &LeftBehindError{Network: att.DisplayName(), IfName: att.IfName, ContainerID: rec.ContainerID, File: file, Reason: err.Error()}
	}
	r.Log.Debug("delegate del", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName)
	if err := cni.DelNetworkList(ctx, list, runtimeConf(rec, att)); err != nil {
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
// An entry whose values fail cacheKeys is not one of them: it is returned as
// a LeftBehindError.
func (r *Runner) cachedAttachments(containerID, ifName string) ([]netconf.Attachment, []error, error) {
	cached, err := r.CNI.GetCachedAttachments(containerID)
	if err != nil {
		return nil, nil, err
	}
	sort.SliceStable(cached, func(i, j int) bool {
		return cached[i].IfName == ifName && cached[j].IfName != ifName
	})
	atts := make([]netconf.Attachment, 0, len(cached))
	var bad []error
	for _, c := range cached {
		if lb := badCacheEntry(r.Store.Dir, c); lb != nil {
			bad = append(bad, lb)
			continue
		}
		atts = append(atts, fromCache(c))
	}
	return atts, bad, nil
}

func fromCache(c *libcni.NetworkAttachment) netconf.Attachment {
	a := netconf.Attachment{Network: c.Network, IfName: c.IfName, Config: c.Config, RuntimeConfig: c.CapabilityArgs}
	// libcni caches a single plugin's config as it ran (a plugin that another
	// meta-plugin, or an older manifold, ran with DelNetwork); libcni's
	// DelNetworkList needs it as a list of one.
	if _, err := confList(&a); err != nil {
		if n, err := netconf.ParseNetwork(c.Config, c.Network); err == nil {
			a.Config = n.Bytes
		}
	}
	// The cached args are the ADD's full CNI_ARGS; DelegateArgs adds IgnoreUnknown
	// again, so drop it here rather than send it twice.
	for _, kv := range c.CniArgs {
		if kv[0] != "IgnoreUnknown" {
			a.CNIArgs = append(a.CNIArgs, kv)
		}
	}
	return a
}

// fillFromCache replaces the config of a recorded attachment that does not
// parse with the cached one for the same network and interface, if that does.
func fillFromCache(recorded, cached []netconf.Attachment) []netconf.Attachment {
	out := recorded
	for i := range recorded {
		if _, err := confList(&recorded[i]); err == nil {
			continue
		}
		for j := range cached {
			c := &cached[j]
			if c.Network != recorded[i].Network || c.IfName != recorded[i].IfName {
				continue
			}
			if _, err := confList(c); err == nil {
				if &out[0] == &recorded[0] {
					out = append([]netconf.Attachment(nil), recorded...)
				}
				out[i].Config = c.Config
			}
		}
	}
	return out
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
