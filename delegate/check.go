package delegate

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// Check runs CHECK for every recorded attachment with its cached result. libcni
// skips a network with disableCheck; a network below cniVersion 0.4.0 has no CHECK
// and is skipped here. A container with no record fails: the runtime asked about an
// attachment we do not know.
//
// A container with no record of manifold's that Multus attached is checked
// from Multus's record and cache (checkMultus).
func (r *Runner) Check(ctx context.Context, containerID, netns string) error {
	return r.CheckWith(ctx, containerID, netns, "", "")
}

// CheckWith is Check with the call's CNI_IFNAME and manifold's cniVersion,
// which reading Multus's record may need.
func (r *Runner) CheckWith(ctx context.Context, containerID, netns, ifName, cniVersion string) error {
	l, err := r.lock(ctx, containerID)
	if err != nil {
		return err
	}
	defer l.Unlock(false)
	if err := r.endLeftovers(l, containerID); err != nil {
		r.Log.Warn("processes that a killed call on this container left running are still there", "error", err)
	}
	ctx = r.noteIn(ctx, l)
	rec, err := r.Store.Load(containerID)
	if (err != nil && !errors.Is(err, scratch.ErrUnknownVersion)) || (err == nil && rec == nil) {
		if found, merr := r.checkMultus(ctx, containerID, netns, ifName, cniVersion); found {
			return merr
		}
	}
	if err != nil {
		return err
	}
	if rec == nil {
		return netconf.Invalid("check container %s: no record of what was attached", containerID)
	}
	rec.NetNS = netns
	for i := range rec.Attachments {
		att := &rec.Attachments[i]
		if att.Auxiliary {
			// Its plugins check an interface of their CNI_IFNAME, which the
			// auxiliary chain never has (docs/configuration.md).
			continue
		}
		list, err := confList(att)
		if err != nil {
			return netconf.Invalid("%v", err)
		}
		if err := cacheKeys(containerID, list.Name, att.IfName); err != nil {
			return netconf.Invalid("check network %s on %q: %v", att.DisplayName(), att.IfName, err)
		}
		if ok, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); !ok {
			continue
		}
		if err := r.CNI.CheckNetworkList(ctx, list, runtimeConf(rec, att)); err != nil {
			if errors.Is(err, libcni.ErrorCheckNotSupp) {
				continue
			}
			return wrapDelegateError(err, "check network %s on %s", att.DisplayName(), att.IfName)
		}
	}
	return nil
}
