package flow

import (
	"context"
	"errors"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// cmdDel never waits for the readiness file, and needs nothing but the scratch
// record or the libcni cache, so pod deletion works when the API server, the
// pod or the netns are gone. Only a DEL that finds neither falls back to the
// default network as the config names it (fallbackNetwork), which may read one
// NAD.
func (p *Plugin) cmdDel(args *skel.CmdArgs) error {
	c, err := p.begin("DEL", args)
	if c == nil {
		return err
	}
	var bad *envError
	if errors.As(err, &bad) && args.ContainerID != "" && scratch.ValidateContainerID(args.ContainerID) != nil {
		// ADD refuses such a container ID, so nothing of ours exists under it.
		// Failing would only make the runtime retry a DEL that can never succeed.
		c.log.Warn("DEL for a container ID that ADD would refuse; nothing to do", "error", err)
		return c.finish(nil)
	}
	if err != nil {
		// A bad CNI_IFNAME or CNI_ARGS does not stop DEL: the record says what to
		// delete, and a DEL that fails forever would wedge the pod's removal.
		c.log.Warn("ignoring a bad CNI environment on DEL", "error", err)
	}
	req := delegate.DelRequest{
		ContainerID: args.ContainerID,
		NetNS:       args.Netns,
		IfName:      args.IfName,
		RuntimeArgs: c.cniArgs,
		CNIVersion:  c.conf.CNIVersion,
	}
	if err == nil {
		// With a bad environment there is no fallback: ADD would have refused
		// it, and so would the plugins of a pod from before manifold.
		req.Fallback = func(ctx context.Context) *netconf.Attachment { return p.fallbackNetwork(ctx, c) }
	}
	err = c.runner.Del(c.ctx, req)
	// In the daemon, an ADD's status write for this container may still be
	// on its way (the ADD answered first). It touches only the API server,
	// and DEL only the node, so they run at the same time; DEL answers once
	// the write is done, so that it never lands after the DEL that undid the
	// attachments, and after it a new sandbox's status cannot be overwritten
	// by this one's (docs/performance-history.md, change 15).
	p.awaitReport(c)
	if left := delegate.LeftBehind(err); len(left) > 0 {
		p.leftBehindEvent(c, left)
	}
	return c.finish(err)
}

// leftBehindEvent sends a Warning event to the pod for each attachment that DEL
// knows it left behind. DEL needs no API server, and this does not change
// that: the event is sent only when the pod is known (CNI_ARGS) and an API
// client can be built from the config, within apiTimeout and at most 5s, and
// a failure to send it is only logged. The DEL's own error, and the log line,
// say the same in any case.
func (p *Plugin) leftBehindEvent(c *call, left []*delegate.LeftBehindError) {
	if c.pod.Name == "" || c.pod.Namespace == "" {
		return
	}
	api, err := p.newAPI(c.conf)
	if err != nil {
		c.log.Debug("no Warning event for what DEL left behind: no API client", "error", err)
		return
	}
	bound := min(c.conf.APITimeout, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	pod := &k8sclient.Pod{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID}
	for _, lb := range left {
		if err := api.Event(ctx, pod, k8sclient.EventWarning, "ErrorDeletingInterface", lb.Error(), hostname(), p.now()); err != nil {
			c.log.Warn("send event", "error", err)
			return
		}
	}
}

// fallbackNetwork is what a DEL with neither a record nor a cache entry
// deletes: the default network (clusterNetwork or delegates[0]) resolved as
// for ADD, but without the pod's annotations, with CNI_IFNAME and the
// runtime's capability args. A pod attached before manifold (by Multus, or
// while manifold's config was absent) would otherwise leak its default
// network's address. When it cannot be resolved (clusterNetwork names a NAD
// and the API server cannot be reached, say), DEL answers success with a
// warning: a DEL that fails forever would wedge the pod's removal, and
// nothing is known to be attached.
func (p *Plugin) fallbackNetwork(ctx context.Context, c *call) *netconf.Attachment {
	if c.args.IfName == "" {
		c.log.Warn("nothing recorded or cached for the container, and CNI_IFNAME is empty: the default network is not deleted")
		return nil
	}
	nads, err := p.nodeNADs(c.conf, c.conf.ClusterNetwork)
	if err == nil {
		var att netconf.Attachment
		if att, err = defaultNetwork(ctx, c.conf, nads); err == nil {
			att.IfName, att.IsDefault = c.args.IfName, true
			att.RuntimeConfig = runtimeArgsFor(c.conf.RuntimeConfig, &att)
			return &att
		}
	}
	c.log.Warn("nothing recorded or cached for the container, and the default network cannot be resolved: it is not deleted; if the pod was attached before manifold, its default network's resources are left", "error", err)
	return nil
}
