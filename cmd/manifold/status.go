package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
)

// cmdStatus (CNI 1.1) reports code 50 while the readiness indicator file is
// missing, and otherwise forwards to the default network's plugins. It does not
// wait: the runtime polls STATUS.
func (p *plugin) cmdStatus(args *skel.CmdArgs) error {
	c, err := p.start("STATUS", args)
	if err != nil {
		return err
	}
	return c.finish(p.status(c))
}

func (p *plugin) status(c *call) error {
	if f := c.conf.ReadinessIndicatorFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return types.NewError(netconf.ErrPluginNotAvailable, "readiness indicator file "+f+" is missing", "")
		}
	}
	// clusterNetwork may name a NAD, as Multus configs usually do: then it is
	// read, once, from the API server (docs/configuration.md says what that
	// costs when the runtime polls STATUS).
	nads, err := p.nodeNADs(c.conf, c.conf.ClusterNetwork)
	if err != nil {
		return err
	}
	att, err := defaultNetwork(c.ctx, c.conf, nads)
	if err != nil {
		return err
	}
	return c.runner.Status(c.ctx, &att)
}
