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
	// clusterNetwork may name a NAD, as Multus configs usually do: then it is
	// read, once, from the API server (docs/configuration.md says what that
	// costs when the runtime polls STATUS).
	nads, err := p.nodeNADs(c.conf, c.conf.ClusterNetwork)
	if err != nil {
		return err
	}
	att, err := defaultNetwork(c.ctx, c.conf, nads)
	if netconf.Code(err) == types.ErrTryAgainLater {
		// The API server does not answer: the default network's plugins
		// cannot be asked, but nothing says they are not ready. Failing here
		// would turn the node's network not ready for as long as the API
		// server is away, for pods that run on regardless.
		c.log.Warn("STATUS could not read the default network's NAD; answering from the readiness file alone", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	return c.runner.Status(c.ctx, &att)
}
