package flow

import (
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
)

// cmdGC (CNI 1.1) removes what belongs to containers the runtime no longer has.
func (p *Plugin) cmdGC(args *skel.CmdArgs) error {
	c, err := p.start("GC", args)
	if err != nil {
		return err
	}
	return c.finish(p.gc(c))
}

func (p *Plugin) gc(c *call) error {
	var in struct {
		Valid  []types.GCAttachment `json:"cni.dev/valid-attachments"`
		Legacy []types.GCAttachment `json:"cni.dev/attachments"`
	}
	if err := json.Unmarshal(c.args.StdinData, &in); err != nil {
		return netconf.Invalid("parse GC valid attachments: %v", err)
	}
	valid := in.Valid
	if valid == nil {
		// Older runtimes send the key that an earlier spec draft named.
		valid = in.Legacy
	}
	// The default networks are forwarded GC even when no record names them, so
	// their plugins can clean up what a record never reached.
	extra, err := staticNetworks(c.ctx, c.conf, nil, netconf.PodRef{})
	if err != nil {
		c.log.Warn("resolve default networks for GC", "error", err)
		extra = nil
	}
	return c.runner.GC(c.ctx, valid, extra)
}
