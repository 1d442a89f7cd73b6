package main

import (
	"github.com/containernetworking/cni/pkg/skel"
)

func (p *plugin) cmdCheck(args *skel.CmdArgs) error {
	c, err := p.start("CHECK", args)
	if err != nil {
		return err
	}
	p.awaitReport(c)
	return c.finish(c.runner.Check(c.ctx, args.ContainerID, args.Netns))
}
