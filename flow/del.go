package flow

import (
	"errors"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/scratch"
)

// cmdDel never talks to the API server and never waits for the readiness file:
// everything it needs is in the scratch record or the libcni cache, so pod
// deletion works when the API server, the pod or the netns are gone.
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
	p.awaitReport(c)
	if err != nil {
		// A bad CNI_IFNAME or CNI_ARGS does not stop DEL: the record says what to
		// delete, and a DEL that fails forever would wedge the pod's removal.
		c.log.Warn("ignoring a bad CNI environment on DEL", "error", err)
	}
	return c.finish(c.runner.Del(c.ctx, delegate.DelRequest{
		ContainerID: args.ContainerID,
		NetNS:       args.Netns,
		IfName:      args.IfName,
		RuntimeArgs: c.cniArgs,
	}))
}
