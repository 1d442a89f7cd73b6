package main

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/manifold-cni/manifold/delegate"
)

// cmdDel never talks to the API server and never waits for the readiness file:
// everything it needs is in the scratch record or the libcni cache, so pod
// deletion works when the API server, the pod or the netns are gone.
func (p *plugin) cmdDel(args *skel.CmdArgs) error {
	c, err := p.begin("DEL", args)
	if err != nil {
		return err
	}
	return c.finish(c.runner.Del(context.Background(), delegate.DelRequest{
		ContainerID: args.ContainerID,
		NetNS:       args.Netns,
		IfName:      args.IfName,
		RuntimeArgs: c.cniArgs,
	}))
}
