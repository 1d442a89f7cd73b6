package netconf

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

func mustResult(t *testing.T, ver, body string) types.Result {
	t.Helper()
	res, err := version.NewResult(ver, []byte(body))
	if err != nil {
		t.Fatalf("result %s: %v", ver, err)
	}
	return res
}

func statusJSON(t *testing.T, att Attachment, res types.Result) string {
	t.Helper()
	st, err := BuildNetworkStatus(att, res)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBuildNetworkStatus(t *testing.T) {
	// A bridge-like result: host bridge, host veth, then the pod's interface;
	// dual stack, default routes for both families plus a non-default route.
	dual := `{"cniVersion":"%s",
	  "interfaces":[{"name":"cni0","mac":"0a:00:00:00:00:01"},
	                {"name":"veth1","mac":"0a:00:00:00:00:02"},
	                {"name":"eth0","mac":"0a:58:0a:01:01:0b","sandbox":"/var/run/netns/p"%s}],
	  "ips":[{"interface":2,"address":"10.1.1.11/24","gateway":"10.1.1.1"%s},
	         {"interface":2,"address":"2001:db8::b/64"%s},
	         {"interface":0,"address":"10.1.1.1/24"%s}],
	  "routes":[{"dst":"0.0.0.0/0","gw":"10.1.1.1"},{"dst":"::/0","gw":"2001:db8::1"},
	            {"dst":"10.2.0.0/16","gw":"10.1.1.254"},{"dst":"0.0.0.0/0","gw":"10.1.1.1"}],
	  "dns":{"nameservers":["10.96.0.10"],"search":["svc.cluster.local"]}}`
	att := Attachment{Network: "cbr0", IfName: "eth0", IsDefault: true}
	for _, tt := range []struct {
		ver, mtu, ipVer, want string
	}{
		{"0.3.1", "", `,"version":"4"`, `{"name":"cbr0","interface":"eth0","ips":["10.1.1.11","2001:db8::b"],"mac":"0a:58:0a:01:01:0b","default":true,"dns":{"nameservers":["10.96.0.10"],"search":["svc.cluster.local"]},"gateway":["10.1.1.1","2001:db8::1"]}`},
		{"0.4.0", "", `,"version":"4"`, `{"name":"cbr0","interface":"eth0","ips":["10.1.1.11","2001:db8::b"],"mac":"0a:58:0a:01:01:0b","default":true,"dns":{"nameservers":["10.96.0.10"],"search":["svc.cluster.local"]},"gateway":["10.1.1.1","2001:db8::1"]}`},
		{"1.0.0", `,"mtu":1450`, "", `{"name":"cbr0","interface":"eth0","ips":["10.1.1.11","2001:db8::b"],"mac":"0a:58:0a:01:01:0b","mtu":1450,"default":true,"dns":{"nameservers":["10.96.0.10"],"search":["svc.cluster.local"]},"gateway":["10.1.1.1","2001:db8::1"]}`},
	} {
		t.Run(tt.ver, func(t *testing.T) {
			// The 0.x results want "version" on each IP; it is the same for both
			// IPv6 entries, so patch it in per address.
			v6 := strings.Replace(tt.ipVer, `"4"`, `"6"`, 1)
			body := sprintf(dual, tt.ver, tt.mtu, tt.ipVer, v6, tt.ipVer)
			if got := statusJSON(t, att, mustResult(t, tt.ver, body)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func sprintf(format string, args ...string) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a, 1)
	}
	return format
}

func TestBuildNetworkStatusSecondary(t *testing.T) {
	att := Attachment{Network: "macvlan-net", NAD: "pods/macvlan", IfName: "net1", DefaultRoute: []string{"10.9.0.1"}}
	// No routes, no DNS: "gateway" is left out; "default" and "dns" ({}, as
	// Multus writes it) are always written.
	res := mustResult(t, "1.0.0", `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01","sandbox":"/proc/1/ns/net"}],
	  "ips":[{"interface":0,"address":"10.9.0.5/16"}]}`)
	want := `{"name":"pods/macvlan","interface":"net1","ips":["10.9.0.5"],"mac":"02:00:00:00:00:01","default":false,"dns":{},"default-route":["10.9.0.1"]}`
	if got := statusJSON(t, att, res); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestBuildNetworkStatusOldResults(t *testing.T) {
	att := Attachment{Network: "old", IfName: "net2"}
	// 0.2.0 has no interfaces: the IPs are taken as they are.
	res := mustResult(t, "0.2.0", `{"cniVersion":"0.2.0","ip4":{"ip":"10.3.0.4/24","gateway":"10.3.0.1","routes":[{"dst":"0.0.0.0/0"}]},"ip6":{"ip":"fd00::4/64"}}`)
	want := `{"name":"old","interface":"net2","ips":["10.3.0.4","fd00::4"],"default":false,"dns":{},"gateway":["10.3.0.1"]}`
	if got := statusJSON(t, att, res); got != want {
		t.Errorf("0.2.0: got  %s\nwant %s", got, want)
	}
	// Interfaces but none in the sandbox: only the addresses that name no interface.
	res = mustResult(t, "1.0.0", `{"cniVersion":"1.0.0","interfaces":[{"name":"host0"}],
	  "ips":[{"interface":0,"address":"192.0.2.1/24"},{"address":"10.4.0.4/24"}]}`)
	want = `{"name":"old","interface":"net2","ips":["10.4.0.4"],"default":false,"dns":{}}`
	if got := statusJSON(t, att, res); got != want {
		t.Errorf("no sandbox: got  %s\nwant %s", got, want)
	}
	// A default route without "gw" goes through the address's gateway.
	res = mustResult(t, "1.0.0", `{"cniVersion":"1.0.0","interfaces":[{"name":"net2","sandbox":"/x"}],
	  "ips":[{"interface":0,"address":"10.5.0.4/24","gateway":"10.5.0.1"},{"interface":0,"address":"fd05::4/64","gateway":"fd05::1"}],
	  "routes":[{"dst":"::/0"},{"dst":"0.0.0.0/0"}]}`)
	want = `{"name":"old","interface":"net2","ips":["10.5.0.4","fd05::4"],"default":false,"dns":{},"gateway":["fd05::1","10.5.0.1"]}`
	if got := statusJSON(t, att, res); got != want {
		t.Errorf("route without gw: got  %s\nwant %s", got, want)
	}
	// A nil result still names the attachment.
	if got, want := statusJSON(t, att, nil), `{"name":"old","interface":"net2","default":false,"dns":{}}`; got != want {
		t.Errorf("nil result: got %s, want %s", got, want)
	}
}

func TestMarshalNetworkStatus(t *testing.T) {
	b, err := MarshalNetworkStatus(nil)
	if err != nil || string(b) != "[]" {
		t.Errorf("nil gave %s, %v; want []", b, err)
	}
	b, err = MarshalNetworkStatus([]NetworkStatus{
		{Name: "cbr0", Interface: "eth0", Default: true},
		{Name: "ns/n", Interface: "net1", DeviceInfo: json.RawMessage(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:04:00.5"}}`)},
	})
	want := `[{"name":"cbr0","interface":"eth0","default":true,"dns":{}},{"name":"ns/n","interface":"net1","default":false,"dns":{},"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:04:00.5"}}}]`
	if err != nil || string(b) != want {
		t.Errorf("got  %s (%v)\nwant %s", b, err, want)
	}
}
