package netconf

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// NetworkStatus is one entry of the k8s.v1.cni.cncf.io/network-status annotation
// (DESIGN §8). The JSON names follow the multi-net spec, so existing readers of
// Multus's annotation read ours.
type NetworkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	Mac       string   `json:"mac,omitempty"`
	Mtu       int      `json:"mtu,omitempty"`
	// Default is always written: readers look for the entry with default=true.
	Default bool `json:"default"`
	// DNS is always written, "{}" when the result carries none, as Multus
	// writes it (its NetworkStatus has the struct, which omitempty keeps).
	DNS          types.DNS       `json:"dns"`
	Gateway      []string        `json:"gateway,omitempty"`
	DefaultRoute []string        `json:"default-route,omitempty"`
	DeviceInfo   json.RawMessage `json:"device-info,omitempty"`
	// Prefixes are IPs with their prefix lengths ("10.1.1.5/24"), for a
	// ResourceClaim's networkData; not part of the annotation.
	Prefixes []string `json:"-"`
}

// BuildNetworkStatus describes one attachment from its ADD result. The result may
// be of any CNI version; it is converted to the current one. The details come
// from the first sandbox interface of the result, and the addresses are those on
// that interface plus those that name no interface. A result with no sandbox
// interface (old plugins report none) gives the addresses that name no interface,
// or all of them when it lists no interfaces at all. A nil result gives an entry
// with just the name, the interface and the flags. DeviceInfo is left for the
// caller, which knows where the device plugin wrote it.
func BuildNetworkStatus(att Attachment, result types.Result) (NetworkStatus, error) {
	st := NetworkStatus{Name: att.DisplayName(), Interface: att.IfName, Default: att.IsDefault}
	if len(att.DefaultRoute) > 0 {
		st.DefaultRoute = append([]string(nil), att.DefaultRoute...)
	}
	if result == nil {
		return st, nil
	}
	res, err := types100.NewResultFromResult(result)
	if err != nil {
		return NetworkStatus{}, fmt.Errorf("convert the result of network %s to CNI %s: %w", att.DisplayName(), types100.ImplementedSpecVersion, err)
	}

	sandbox := -1
	for i, iface := range res.Interfaces {
		if iface != nil && iface.Sandbox != "" {
			sandbox = i
			break
		}
	}
	if sandbox >= 0 {
		iface := res.Interfaces[sandbox]
		if iface.Name != "" {
			st.Interface = iface.Name
		}
		st.Mac = iface.Mac
		st.Mtu = iface.Mtu
	}
	var mine []*types100.IPConfig
	for _, ip := range res.IPs {
		if ip == nil || ip.Address.IP == nil {
			continue
		}
		if ip.Interface != nil && *ip.Interface != sandbox && len(res.Interfaces) > 0 {
			continue
		}
		mine = append(mine, ip)
		st.IPs = append(st.IPs, ip.Address.IP.String())
		st.Prefixes = append(st.Prefixes, ip.Address.String())
	}
	st.Gateway = defaultGateways(res.Routes, mine)
	if !isEmptyDNS(res.DNS) {
		st.DNS = *res.DNS.Copy()
	}
	return st, nil
}

// MarshalNetworkStatus encodes the annotation value. No entries encode as "[]",
// not "null", so that readers always find a list.
func MarshalNetworkStatus(statuses []NetworkStatus) ([]byte, error) {
	if statuses == nil {
		statuses = []NetworkStatus{}
	}
	b, err := json.Marshal(statuses)
	if err != nil {
		return nil, fmt.Errorf("encode network status: %w", err)
	}
	return b, nil
}

// defaultGateways lists the gateways of the default routes, each once. A default
// route without "gw" goes through the gateway of an address of its family: that
// is what the spec says for such routes and what the reference plugins do
// (host-local with "routes":[{"dst":"0.0.0.0/0"}] returns exactly that).
func defaultGateways(routes []*types.Route, ips []*types100.IPConfig) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range routes {
		if r == nil || !isDefaultDst(r.Dst) {
			continue
		}
		gw := r.GW
		if gw == nil {
			v4 := r.Dst.IP.To4() != nil
			for _, ip := range ips {
				if ip.Gateway != nil && (ip.Gateway.To4() != nil) == v4 {
					gw = ip.Gateway
					break
				}
			}
		}
		if gw == nil {
			continue
		}
		if s := gw.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// isDefaultDst reports whether dst is 0.0.0.0/0 or ::/0.
func isDefaultDst(dst net.IPNet) bool {
	if dst.IP == nil || !dst.IP.IsUnspecified() {
		return false
	}
	ones, bits := dst.Mask.Size()
	return ones == 0 && bits > 0
}

func isEmptyDNS(d types.DNS) bool {
	return len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0
}
