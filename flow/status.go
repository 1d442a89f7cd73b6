package flow

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
)

// cmdStatus (CNI 1.1) reports code 50 while the readiness indicator file is
// missing, and otherwise forwards to the default network's plugins. It does not
// wait: the runtime polls STATUS.
func (p *Plugin) cmdStatus(args *skel.CmdArgs) error {
	c, err := p.start("STATUS", args)
	if err != nil {
		return err
	}
	return c.finish(p.status(c))
}

func (p *Plugin) status(c *call) error {
	if f := c.conf.ReadinessIndicatorFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return types.NewError(netconf.ErrPluginNotAvailable, "readiness indicator file "+f+" is missing", "")
		}
	}
	atts, err := staticNetworks(c.ctx, c.conf, nil, c.pod)
	if err != nil {
		return err
	}
	return c.runner.Status(c.ctx, &atts[0])
}
