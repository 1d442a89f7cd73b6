package flow

import (
	"encoding/json"
	"strconv"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/delegate"
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
	req := delegate.GCRequest{Valid: valid, CNIVersion: c.conf.CNIVersion}
	// The node's static networks are forwarded GC even when no record names
	// them, so their plugins can clean up what a record never reached. One
	// that cannot be resolved (its NAD is missing, the API is down) is left
	// out, with a warning: GC still does the rest.
	refs := append([]string{c.conf.ClusterNetwork}, c.conf.DefaultNetworks...)
	nads, err := p.nodeNADs(c.conf, refs...)
	if err != nil {
		c.log.Warn("gc: no API client, so networks named by NAD are not forwarded GC", "error", err)
	}
	if cache, ok := nads.(*nadCache); ok {
		cache.start(c.ctx, staticNADKeys(c.conf, ""))
	}
	if def, err := defaultNetwork(c.ctx, c.conf, nads); err != nil {
		c.log.Warn("gc: resolve the default network", "error", err)
	} else {
		req.Default = &def
	}
	if c.conf.ClusterNetwork == "" {
		for i := 1; i < len(c.conf.Delegates); i++ {
			n, err := netconf.ParseNetwork(c.conf.Delegates[i], "")
			if err != nil {
				c.log.Warn("gc: parse a delegate", "delegate", i, "error", err)
				continue
			}
			req.Static = append(req.Static, netconf.NewAttachment(n, ""))
		}
	}
	for i, ref := range c.conf.DefaultNetworks {
		att, err := resolveRef(c.ctx, c.conf, nads, "defaultNetworks["+strconv.Itoa(i)+"]", ref)
		if err != nil {
			c.log.Warn("gc: resolve a default network", "error", err)
			continue
		}
		req.Static = append(req.Static, att)
	}
	return c.runner.GC(c.ctx, req)
}
