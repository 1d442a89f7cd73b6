package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// gatewayChoice is the attachment that carries the default route for one
// family: through gw, or, with gw nil, through the default routes its own
// plugins set ("default-route": []).
type gatewayChoice struct {
	index  int // into rec.Attachments
	gw     net.IP
	family int
}

// chooseGateways finds the attachments that asked for default-route. More than
// one gateway per IP family is an error: the pod can have only one default route.
func chooseGateways(atts []netconf.Attachment) (v4, v6 *gatewayChoice, err error) {
	for i := range atts {
		for _, g := range atts[i].DefaultRoute {
			ip := net.ParseIP(g)
			if ip == nil {
				return nil, nil, netconf.Invalid("network %s: default-route gateway %q is not an IP address", atts[i].DisplayName(), g)
			}
			slot, family := &v6, netlink.FAMILY_V6
			if ip.To4() != nil {
				slot, family = &v4, netlink.FAMILY_V4
			}
			if *slot != nil {
				return nil, nil, netconf.Invalid("network %s: default-route gateway %s conflicts with gateway %s of network %s (one per IP family)",
					atts[i].DisplayName(), ip, (*slot).gw, atts[(*slot).index].DisplayName())
			}
			*slot = &gatewayChoice{index: i, gw: ip, family: family}
		}
	}
	return v4, v6, nil
}

// CheckDefaultRoutes validates the default-route requests of a pod before any
// delegate runs, so a conflict fails the ADD without touching the node.
func CheckDefaultRoutes(atts []netconf.Attachment) error {
	_, _, err := chooseGateways(atts)
	return err
}

// applyDefaultRoute implements DESIGN §6. If no attachment asked for default-route
// nothing changes. Otherwise, for each IP family that has a requested gateway, the
// default routes of that family on every other attachment's interface are removed,
// the requested one is installed, and the results (returned and cached) are edited
// to match. A family with no request keeps its routes: asking for an IPv4 default
// via net1 should not cut the pod's IPv6 default via eth0.
//
// "default-route": [] asks, in the multi-net spec's words, for the
// attachment's own default routes (those its plugins set) to be the pod's:
// in each family that no gateway was asked for, the first such attachment,
// in attachment order, that has a default route of that family keeps it, and
// every other interface's default routes of that family are removed. A
// family in which it has none is left as it is (docs/configuration.md).
func (r *Runner) applyDefaultRoute(_ context.Context, rec *scratch.Record, results []types.Result) error {
	v4, v6, err := chooseGateways(rec.Attachments)
	if err != nil {
		return err
	}
	var own []int
	for i := range rec.Attachments {
		if rec.Attachments[i].DefaultRouteOwn && !rec.Attachments[i].Auxiliary {
			own = append(own, i)
		}
	}
	if v4 == nil && v6 == nil && len(own) == 0 {
		return nil
	}
	err = inNetNS(rec.NetNS, func() error {
		for _, slot := range []struct {
			c      **gatewayChoice
			family int
		}{{&v4, netlink.FAMILY_V4}, {&v6, netlink.FAMILY_V6}} {
			if *slot.c != nil {
				continue
			}
			c, err := ownDefaultRoute(rec.Attachments, own, slot.family)
			if err != nil {
				return err
			}
			*slot.c = c
		}
		for _, c := range []*gatewayChoice{v4, v6} {
			if c == nil {
				continue
			}
			if err := r.moveDefaultRoute(rec.Attachments, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set default route in %s: %w", rec.NetNS, err)
	}
	for _, i := range own {
		if (v4 == nil || v4.index != i) && (v6 == nil || v6.index != i) {
			// Not an error: the pod has the default routes it would have had.
			r.Log.Warn("\"default-route\": [] changed nothing: the network set no default route of a family that no other network asked a gateway for, or an earlier network's [] took it",
				"network", rec.Attachments[i].DisplayName(), AttachmentIfnameKey, rec.Attachments[i].IfName)
		}
	}
	for i := range results {
		edited, changed, err := editResult(results[i], &rec.Attachments[i], i, v4, v6)
		if err != nil {
			return err
		}
		if !changed {
			continue
		}
		results[i] = edited
		if err := r.rewriteCachedResult(rec, &rec.Attachments[i], edited); err != nil {
			return err
		}
	}
	return nil
}

// ownDefaultRoute runs inside the pod netns: the first attachment of own
// whose interface has a default route of family, or nil.
func ownDefaultRoute(atts []netconf.Attachment, own []int, family int) (*gatewayChoice, error) {
	for _, i := range own {
		link, err := netlink.LinkByName(atts[i].IfName)
		if err != nil {
			return nil, fmt.Errorf("find interface %s: %w", atts[i].IfName, err)
		}
		routes, err := netlink.RouteList(link, family)
		if err != nil {
			return nil, fmt.Errorf("list routes on %s: %w", atts[i].IfName, err)
		}
		for _, rt := range routes {
			if isDefault(rt.Dst) {
				return &gatewayChoice{index: i, family: family}, nil
			}
		}
	}
	return nil, nil
}

// moveDefaultRoute runs inside the pod netns.
func (r *Runner) moveDefaultRoute(atts []netconf.Attachment, c *gatewayChoice) error {
	for i := range atts {
		if atts[i].Auxiliary {
			continue // it made no interface
		}
		if i == c.index && c.gw == nil {
			r.Log.Debug("default route kept", "family", familyName(c.family), AttachmentIfnameKey, atts[i].IfName)
			continue // its own default routes are the pod's
		}
		link, err := netlink.LinkByName(atts[i].IfName)
		if err != nil {
			return fmt.Errorf("find interface %s: %w", atts[i].IfName, err)
		}
		routes, err := netlink.RouteList(link, c.family)
		if err != nil {
			return fmt.Errorf("list routes on %s: %w", atts[i].IfName, err)
		}
		for _, rt := range routes {
			if !isDefault(rt.Dst) {
				continue
			}
			if err := netlink.RouteDel(&rt); err != nil {
				return fmt.Errorf("remove default route via %s on %s: %w", rt.Gw, atts[i].IfName, err)
			}
		}
		if i == c.index {
			rt := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: c.gw, Dst: defaultDst(c.gw)}
			if err := netlink.RouteReplace(rt); err != nil {
				return fmt.Errorf("add default route via %s on %s: %w", c.gw, atts[i].IfName, err)
			}
			r.Log.Debug("default route moved", "gateway", c.gw.String(), AttachmentIfnameKey, atts[i].IfName)
		}
	}
	return nil
}

func familyName(family int) string {
	if family == netlink.FAMILY_V4 {
		return "IPv4"
	}
	return "IPv6"
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && dst.IP.IsUnspecified()
}

func defaultDst(gw net.IP) *net.IPNet {
	if gw.To4() != nil {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// editResult removes default routes of the moved families from a result and adds
// the requested one to the chosen attachment, keeping the result's own version.
func editResult(res types.Result, att *netconf.Attachment, index int, v4, v6 *gatewayChoice) (types.Result, bool, error) {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, false, fmt.Errorf("convert result of network %s: %w", att.DisplayName(), err)
	}
	changed := false
	kept := cur.Routes[:0]
	for _, rt := range cur.Routes {
		dst := rt.Dst
		c := v6
		if dst.IP.To4() != nil {
			c = v4
		}
		if isDefault(&dst) && c != nil && (c.gw != nil || c.index != index) {
			changed = true
			continue
		}
		kept = append(kept, rt)
	}
	cur.Routes = kept
	for _, c := range []*gatewayChoice{v4, v6} {
		if c != nil && c.index == index && c.gw != nil {
			cur.Routes = append(cur.Routes, &types.Route{Dst: *defaultDst(c.gw), GW: c.gw})
			changed = true
		}
	}
	if !changed {
		return res, false, nil
	}
	out, err := cur.GetAsVersion(res.Version())
	if err != nil {
		return nil, false, fmt.Errorf("convert result of network %s back to %s: %w", att.DisplayName(), res.Version(), err)
	}
	return out, true, nil
}

// rewriteCachedResult replaces the result in libcni's cache entry for one
// attachment, so that CHECK (which compares routes) agrees with the netns. libcni
// has no API for this; the entry is JSON with the result under "result".
func (r *Runner) rewriteCachedResult(rec *scratch.Record, att *netconf.Attachment, res types.Result) error {
	path := filepath.Join(r.Store.Dir, "results", fmt.Sprintf("%s-%s-%s", att.Network, rec.ContainerID, att.IfName))
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read cached result of network %s: %w", att.DisplayName(), err)
	}
	var entry map[string]json.RawMessage
	if err := json.Unmarshal(b, &entry); err != nil {
		return fmt.Errorf("parse cached result of network %s: %w", att.DisplayName(), err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	entry["result"] = raw
	b, err = json.Marshal(entry)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write cached result of network %s: %w", att.DisplayName(), err)
	}
	return os.Rename(tmp, path)
}
