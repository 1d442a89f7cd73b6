package main

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"
)

func (p *plugin) cmdCheck(args *skel.CmdArgs) error {
	c, err := p.start("CHECK", args)
	if err != nil {
		return err
	}
	p.awaitReport(c)
	return c.finish(c.runner.Check(context.Background(), args.ContainerID, args.Netns))
}
