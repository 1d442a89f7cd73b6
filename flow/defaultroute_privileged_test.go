package flow

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// TestEmptyDefaultRoute: "default-route": [] in a selection element, with
// the real bridge and host-local plugins in a real network namespace. The
// multi-net spec says the network's own default route (as its plugins set
// it) is then the pod's; manifold does that per address family:
//   - the network's IPv4 default route stays and eth0's goes, while eth0
//     keeps its IPv6 default route (the network has none);
//   - a network that sets no default route changes nothing;
//   - a gateway that another element asks for wins its family over [].
//
// network-status follows the routes. Before, [] was refused with code 7.
// Multus v4.3.0 removes every interface's default routes of both families,
// the [] network's own included, in intent (its netlink no longer finds
// them: multus-cni#1552); docs/compatibility.md has the difference.
func TestEmptyDefaultRoute(t *testing.T) {
	testenv.RequirePrivileged(t)
	plugins := testenv.Plugins(t)
	leases := t.TempDir()
	bridges := map[string]string{}
	bridge := func(key string) string {
		if bridges[key] == "" {
			bridges[key] = testenv.UniqueName("mfdr")
			name := bridges[key]
			t.Cleanup(func() { testenv.DeleteLink(name) })
		}
		return bridges[key]
	}
	// The default network: IPv4 and IPv6, a default route in each.
	cluster := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cluster","type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.217.1.0/24"}],[{"subnet":"fd00:217:1::/64"}]],
		"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}`, bridge("cluster"), leases)
	nads := map[string]string{
		// IPv4 only, with a default route through its bridge.
		"default/own": fmt.Sprintf(`{"cniVersion":"1.0.0","type":"bridge","bridge":%q,"isGateway":true,
			"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.217.2.0/24","routes":[{"dst":"0.0.0.0/0"}]}}`, bridge("own"), leases),
		// No default route.
		"default/plain": fmt.Sprintf(`{"cniVersion":"1.0.0","type":"bridge","bridge":%q,"isGateway":true,
			"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.217.3.0/24"}}`, bridge("plain"), leases),
	}

	for _, tc := range []struct {
		name       string
		annotation string
		want       []string          // the pod's default routes
		gateways   map[string]string // network-status gateways by interface ("" none)
	}{
		{"its own default route", `[{"name":"own","default-route":[]}]`,
			[]string{"default via 10.217.2.1 dev net1", "default via fd00:217:1::1 dev eth0"},
			map[string]string{"eth0": "fd00:217:1::1", "net1": "10.217.2.1"}},
		{"none of its own", `[{"name":"plain","default-route":[]}]`,
			[]string{"default via 10.217.1.1 dev eth0", "default via fd00:217:1::1 dev eth0"},
			map[string]string{"eth0": "10.217.1.1,fd00:217:1::1", "net1": ""}},
		{"a gateway asked for wins its family", `[{"name":"own","default-route":[]},{"name":"plain","default-route":["10.217.3.1"]}]`,
			[]string{"default via 10.217.3.1 dev net2", "default via fd00:217:1::1 dev eth0"},
			map[string]string{"eth0": "fd00:217:1::1", "net1": "", "net2": "10.217.3.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{pod: &k8sclient.Pod{Namespace: "default", Name: "p1", UID: "u1",
				Annotations: map[string]string{annotNetworks: tc.annotation}}, nads: nads}
			p := New()
			p.stdout, p.stderr = io.Discard, io.Discard
			p.newAPI = func(*netconf.Config) (podAPI, error) { return api, nil }
			netns := testenv.NetNS(t)
			conf := testConf(t, map[string]any{"delegates": []any{json.RawMessage(cluster)}, "binDir": plugins})
			args := &skel.CmdArgs{ContainerID: testenv.UniqueName("c"), Netns: netns.Path(), IfName: "eth0", Path: plugins,
				Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: conf}
			if err := p.cmdAdd(args); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			t.Cleanup(func() {
				if err := p.cmdDel(args); err != nil {
					t.Errorf("DEL: %v", err)
				}
			})
			if got := defaultRoutesIn(t, netns); !slices.Equal(got, tc.want) {
				t.Errorf("default routes %q, want %q", got, tc.want)
			}
			if len(api.statuses) != 1 {
				t.Fatalf("status patches %q, want one", api.statuses)
			}
			var st []netconf.NetworkStatus
			if err := json.Unmarshal([]byte(api.statuses[0]), &st); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, s := range st {
				got[s.Interface] = strings.Join(s.Gateway, ",")
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.gateways) {
				t.Errorf("network-status gateways %v, want %v", got, tc.gateways)
			}
		})
	}
}

// defaultRoutesIn lists the default routes of both families in netns, as
// "default via <gw> dev <if>", sorted.
func defaultRoutesIn(t *testing.T, netns ns.NetNS) []string {
	t.Helper()
	var out []string
	err := netns.Do(func(ns.NetNS) error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); !r.Dst.IP.IsUnspecified() || ones != 0 {
					continue
				}
			}
			l, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("default via %v dev %s", r.Gw, l.Attrs().Name))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
