package delegate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/multus"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// multusDirs are the dirs where Multus's records are looked for, in order:
// cniDir (an admin who gave manifold Multus's cniDir), then MultusDir.
func (r *Runner) multusDirs() []string {
	dirs := []string{r.Store.Dir}
	if r.MultusDir != "" && filepath.Clean(r.MultusDir) != filepath.Clean(r.Store.Dir) && r.CNIFor != nil {
		dirs = append(dirs, r.MultusDir)
	}
	return dirs
}

// cniFor is libcni with dir as its cache dir: libcni finds the cached results
// of Multus's ADDs there, and removes each after its DEL.
func (r *Runner) cniFor(dir string) libcni.CNI {
	if dir == r.Store.Dir {
		return r.CNI
	}
	return r.CNIFor(dir)
}

// loadMultus reads Multus's state for a container in dir. In cniDir only a
// Multus record counts: cache entries alone there are manifold's own.
func (r *Runner) loadMultus(dir, containerID, ifName, cniVersion string) (*multus.Record, error) {
	m, err := multus.LoadWith(dir, containerID, multus.Options{IfName: ifName, CNIVersion: cniVersion, AllowedPluginTypes: r.AllowedPluginTypes})
	if dir == r.Store.Dir && (m == nil || !m.HasRecord) {
		return nil, nil
	}
	return m, err
}

// delMultus tears down what Multus attached, as read from dir, in reverse
// order, each attachment with the config and CNI_ARGS it was attached with,
// and then removes Multus's record and cache entries. found is false when dir
// holds nothing for the container. When a delegate's DEL failed, or something
// is left behind, Multus's files are kept: a retry DELs again from them, and
// the error names what is left.
func (r *Runner) delMultus(ctx context.Context, req DelRequest, dir string) (found bool, err error) {
	m, loadErr := r.loadMultus(dir, req.ContainerID, req.IfName, req.CNIVersion)
	if m == nil && loadErr == nil {
		return false, nil
	}
	log := r.Log.With("multusDir", dir)
	var errs []error
	if m != nil {
		for _, w := range m.Warnings {
			log.Warn("Multus's state: " + w)
		}
		rec := &scratch.Record{ContainerID: req.ContainerID, NetNS: req.NetNS, RuntimeArgs: m.RuntimeArgs}
		if rec.NetNS == "" {
			rec.NetNS = m.NetNS
			// A pod never has the node's own network namespace: a cache
			// entry that says so is damaged, and its plugins' DEL there
			// would remove the node's interface of that name.
			if isNodeNetNS(rec.NetNS) {
				log.Warn("Multus's cache names the node's own network namespace as the pod's; deleting without a netns, as for one that is gone", "netns", rec.NetNS)
				rec.NetNS = ""
			}
		}
		if netnsGone(rec.NetNS) {
			rec.NetNS = ""
		}
		if rec.RuntimeArgs == nil {
			rec.RuntimeArgs = req.RuntimeArgs
		}
		cni := r.cniFor(dir)
		for i := len(m.Attachments) - 1; i >= 0; i-- {
			att, o := &m.Attachments[i], m.Origins[i]
			log.Info("deleting an attachment of Multus", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName, "configFrom", string(o.Source), "file", o.File)
			dctx, cancel := r.undoContext(ctx)
			err := r.delWith(dctx, cni, rec, att, o.File)
			cancel()
			if err != nil {
				errs = append(errs, err)
			}
		}
		for _, u := range m.Unexplained {
			errs = append(errs, &LeftBehindError{Network: u.Network, IfName: u.IfName, ContainerID: req.ContainerID, File: u.File, Reason: u.Reason})
		}
	}
	if loadErr != nil {
		errs = append(errs, &LeftBehindError{ContainerID: req.ContainerID, File: filepath.Join(dir, req.ContainerID), Reason: "Multus's record cannot be read: " + loadErr.Error()})
	}
	if len(errs) > 0 {
		log.Warn("Multus's record and cache entries are kept", "error", errors.Join(errs...))
		return true, errors.Join(errs...)
	}
	if err := multus.Remove(dir, req.ContainerID); err != nil {
		return true, err
	}
	log.Info("deleted every attachment of Multus; removed its record and cache entries", "attachments", len(m.Attachments))
	return true, nil
}

// checkMultus runs CHECK for what Multus attached, with Multus's cached
// results. found is false when no dir holds anything for the container.
func (r *Runner) checkMultus(ctx context.Context, containerID, netns, ifName, cniVersion string) (found bool, err error) {
	for _, dir := range r.multusDirs() {
		m, loadErr := r.loadMultus(dir, containerID, ifName, cniVersion)
		if m == nil && loadErr == nil {
			continue
		}
		if loadErr != nil {
			return true, netconf.Invalid("check container %s: %v", containerID, loadErr)
		}
		if err := m.UnexplainedError(); err != nil {
			return true, netconf.Invalid("check %v", err)
		}
		rec := &scratch.Record{ContainerID: containerID, NetNS: netns, RuntimeArgs: m.RuntimeArgs}
		cni := r.cniFor(dir)
		for i := range m.Attachments {
			att := &m.Attachments[i]
			list, err := confList(att)
			if err == nil {
				err = cacheKeys(containerID, list.Name, att.IfName)
			}
			if err != nil {
				return true, netconf.Invalid("check network %s on %q (attached by Multus): %v", att.DisplayName(), att.IfName, err)
			}
			if ok, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); !ok {
				continue
			}
			if err := cni.CheckNetworkList(ctx, list, runtimeConf(rec, att)); err != nil {
				if errors.Is(err, libcni.ErrorCheckNotSupp) {
					continue
				}
				return true, wrapDelegateError(err, "check network %s on %s (attached by Multus)", att.DisplayName(), att.IfName)
			}
		}
		return true, nil
	}
	return false, nil
}

// gcMultus adds to g what valid containers that Multus attached hold, so
// that the delegates' GC keeps it, and returns the IDs of the containers
// that Multus attached and the runtime no longer lists.
func (r *Runner) gcMultus(validIDs map[string]bool, manifoldIDs []string, cniVersion string, g *gcNetworks, known map[string]bool) (stale []string, errs []error) {
	hasRecord := make(map[string]bool, len(manifoldIDs))
	for _, id := range manifoldIDs {
		hasRecord[id] = true
	}
	for _, dir := range r.multusDirs() {
		ids, err := multus.List(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("gc: %w", err))
		}
		for _, id := range ids {
			if !validIDs[id] {
				if dir != r.Store.Dir { // cniDir's are manifold's stale IDs already
					stale = append(stale, id)
				}
				continue
			}
			if dir == r.Store.Dir && !hasRecord[id] {
				continue // only cache entries: manifold's own, taken from the cache
			}
			m, err := r.loadMultus(dir, id, "", cniVersion)
			if m == nil || err != nil || len(m.Unexplained) > 0 {
				if m != nil || err != nil {
					r.Log.Warn("gc: Multus's record of a valid container cannot be read in full; it counts as unknown", "container", id, "multusDir", dir, "error", errors.Join(err, m.UnexplainedError()))
				}
				continue
			}
			known[id] = true
			for i := range m.Attachments {
				a := &m.Attachments[i]
				g.add(a)
				g.valid(a.Network, id, a.IfName)
			}
		}
	}
	return stale, errs
}

// cacheFile is libcni's cache entry for an attachment under cacheDir.
func cacheFile(cacheDir, containerID string, att *netconf.Attachment) string {
	return filepath.Join(cacheDir, "results", att.Network+"-"+containerID+"-"+att.IfName)
}
