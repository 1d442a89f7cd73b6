package flow

import (
	"github.com/containernetworking/cni/pkg/skel"
)

func (p *Plugin) cmdCheck(args *skel.CmdArgs) error {
	c, err := p.start("CHECK", args)
	if err != nil {
		return err
	}
	p.awaitReport(c)
	return c.finish(c.runner.CheckWith(c.ctx, args.ContainerID, args.Netns, args.IfName, c.conf.CNIVersion))
}
