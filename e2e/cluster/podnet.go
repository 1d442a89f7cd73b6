package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// PodNet is what a pod's network namespace holds, read from the host in that
// namespace: what `ip addr`, `ip route` and `sysctl` would show inside the
// pod, whose image has no shell to run them.
type PodNet struct {
	// Links are the pod's interfaces, lo left out, by name.
	Links map[string]PodLink
	// Routes are the IPv4 routes of the main table, each as
	// "<dst> via <gateway> dev <interface>": "default" for 0.0.0.0/0, "-"
	// for no gateway.
	Routes []string
	// Sysctls are the values of the sysctls that PodNet was asked for, by
	// their dotted name (net.ipv4.conf.eth0.arp_filter).
	Sysctls map[string]string
}

// PodLink is one interface of a pod.
type PodLink struct {
	// Kind is netlink's link type: veth, macvlan, bridge, …
	Kind string
	// Addrs are its IPv4 addresses in CIDR form (10.1.1.21/24).
	Addrs []string
}

// DefaultRoutes are the routes whose destination is "default".
func (n *PodNet) DefaultRoutes() []string {
	var out []string
	for _, r := range n.Routes {
		if strings.HasPrefix(r, "default ") {
			out = append(out, r)
		}
	}
	return out
}

// Names are the pod's interfaces, sorted.
func (n *PodNet) Names() []string {
	var out []string
	for name := range n.Links {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// String is the whole view, for a failure message.
func (n *PodNet) String() string {
	var b strings.Builder
	for _, name := range n.Names() {
		l := n.Links[name]
		fmt.Fprintf(&b, "%s (%s) %v; ", name, l.Kind, l.Addrs)
	}
	fmt.Fprintf(&b, "routes %q; sysctls %v", n.Routes, n.Sysctls)
	return b.String()
}

// PodNet reads the network namespace of the pod's ready sandbox, found
// through the CRI (Sandbox), and the given sysctls in it.
func (c *Cluster) PodNet(ctx context.Context, p *corev1.Pod, sysctls ...string) (*PodNet, error) {
	_, path, err := c.Sandbox(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &PodNet{Links: map[string]PodLink{}, Sysctls: map[string]string{}}
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		links, err := testenv.LinkList()
		if err != nil {
			return err
		}
		byIndex := map[int]string{}
		for _, l := range links {
			name := l.Attrs().Name
			byIndex[l.Attrs().Index] = name
			if name == "lo" {
				continue
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", name, err)
			}
			pl := PodLink{Kind: l.Type()}
			for _, a := range addrs {
				pl.Addrs = append(pl.Addrs, a.IPNet.String())
			}
			out.Links[name] = pl
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		for _, r := range routes {
			dst, gw := "default", "-"
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); !r.Dst.IP.IsUnspecified() || ones != 0 {
					dst = r.Dst.String()
				}
			}
			if r.Gw != nil {
				gw = r.Gw.String()
			}
			out.Routes = append(out.Routes, fmt.Sprintf("%s via %s dev %s", dst, gw, byIndex[r.LinkIndex]))
		}
		// /proc/sys/net is the network namespace's of the thread that
		// reads it: this one, in the pod's.
		for _, s := range sysctls {
			b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(s, ".", "/")))
			if err != nil {
				return fmt.Errorf("sysctl %s: %w", s, err)
			}
			out.Sysctls[s] = strings.TrimSpace(string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s's network namespace %s: %w", p.Name, path, err)
	}
	return out, nil
}
