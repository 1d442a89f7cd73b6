package netconf

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// wantCode7 fails unless err is a *types.Error with code 7 whose message holds
// every one of parts.
func wantCode7(t *testing.T, err error, parts ...string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *types.Error", err, err)
	}
	if e.Code != types.ErrInvalidNetworkConfig {
		t.Fatalf("error code %d, want 7: %v", e.Code, err)
	}
	for _, p := range parts {
		if !strings.Contains(e.Msg, p) {
			t.Errorf("error %q does not mention %q", e.Msg, p)
		}
	}
}

func TestParseNetworksAnnotationListForm(t *testing.T) {
	tests := []struct {
		in   string
		want []NetworkSelection
	}{
		{"", nil},
		{"   ", nil},
		{"macvlan", []NetworkSelection{{Name: "macvlan", Namespace: "pods"}}},
		{"other/macvlan", []NetworkSelection{{Name: "macvlan", Namespace: "other"}}},
		{"macvlan@data0", []NetworkSelection{{Name: "macvlan", Namespace: "pods", InterfaceRequest: "data0"}}},
		{" other / macvlan @ data0 ", []NetworkSelection{{Name: "macvlan", Namespace: "other", InterfaceRequest: "data0"}}},
		{"/macvlan", []NetworkSelection{{Name: "macvlan", Namespace: "pods"}}},
		{"a@foo, b,a", []NetworkSelection{
			{Name: "a", Namespace: "pods", InterfaceRequest: "foo"},
			{Name: "b", Namespace: "pods"},
			{Name: "a", Namespace: "pods"},
		}},
		{"sriov.net-1", []NetworkSelection{{Name: "sriov.net-1", Namespace: "pods"}}},
	}
	for _, tt := range tests {
		got, err := ParseNetworksAnnotation(tt.in, "pods")
		if err != nil {
			t.Errorf("ParseNetworksAnnotation(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseNetworksAnnotation(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseNetworksAnnotationJSONForm(t *testing.T) {
	in := `[
	  {"name": "macvlan", "namespace": "net", "interface": "data0",
	   "ips": ["10.1.1.11/24", "2001:db8::5"], "mac": "c2:11:22:33:44:55",
	   "infiniband-guid": "c2:11:22:33:44:55:66:77",
	   "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "UDP", "hostIP": "192.0.2.1"},
	                    {"hostPort": 9090, "containerPort": 90}],
	   "bandwidth": {"ingressRate": 1000, "ingressBurst": 2000, "egressRate": 3000, "egressBurst": 4000},
	   "deviceID": "0000:04:00.5",
	   "cni-args": {"vlan": 100, "big": 12345678901234567890, "name": "x"},
	   "default-route": ["10.1.1.1", "2001:db8::1"],
	   "unknown-key": {"ignored": true}},
	  {"name": "claim", "ipam-claim-reference": "vm1.net", "namespace": null},
	  {"Name": "folded", "MAC": "02:00:00:00:00:01"},
	  {"name": "old", "interfaceRequest": "legacy0"}
	]`
	got, err := ParseNetworksAnnotation(in, "pods")
	if err != nil {
		t.Fatal(err)
	}
	want := []NetworkSelection{
		{
			Name: "macvlan", Namespace: "net", InterfaceRequest: "data0",
			IPs: []string{"10.1.1.11/24", "2001:db8::5"}, MAC: "c2:11:22:33:44:55",
			InfinibandGUID: "c2:11:22:33:44:55:66:77",
			PortMappings: []PortMapping{
				{HostPort: 8080, ContainerPort: 80, Protocol: "udp", HostIP: "192.0.2.1"},
				{HostPort: 9090, ContainerPort: 90, Protocol: "tcp"},
			},
			Bandwidth:    &Bandwidth{IngressRate: 1000, IngressBurst: 2000, EgressRate: 3000, EgressBurst: 4000},
			DeviceID:     "0000:04:00.5",
			CNIArgs:      map[string]any{"vlan": json.Number("100"), "big": json.Number("12345678901234567890"), "name": "x"},
			DefaultRoute: []string{"10.1.1.1", "2001:db8::1"},
		},
		{Name: "claim", Namespace: "pods", IPAMClaimReference: "vm1.net"},
		{Name: "folded", Namespace: "pods", MAC: "02:00:00:00:00:01"},
		{Name: "old", Namespace: "pods", InterfaceRequest: "legacy0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseNetworksAnnotationSingleObject(t *testing.T) {
	got, err := ParseNetworksAnnotation(` {"name":"a","interface":"x1"} `, "pods")
	if err != nil {
		t.Fatal(err)
	}
	want := []NetworkSelection{{Name: "a", Namespace: "pods", InterfaceRequest: "x1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := ParseNetworksAnnotation(`[]`, "pods"); err != nil || len(got) != 0 {
		t.Errorf("[] gave %v, %v; want no networks", got, err)
	}
}

func TestParseNetworksAnnotationErrors(t *testing.T) {
	huge := strings.Repeat("a,", MaxAnnotationBytes/2) + "a"
	many := strings.TrimSuffix(strings.Repeat("a,", MaxNetworkSelections+1), ",")
	manyJSON := "[" + strings.TrimSuffix(strings.Repeat(`{"name":"a"},`, MaxNetworkSelections+1), ",") + "]"
	tests := []struct {
		name, in string
		parts    []string
	}{
		{"16-char interface", "a@abcdefghijklmnop", []string{"entry 1", "abcdefghijklmnop", "more than 15"}},
		{"16-char interface json", `[{"name":"a","interface":"abcdefghijklmnop"}]`, []string{`"interface"`, "abcdefghijklmnop"}},
		{"interface dot", `[{"name":"a","interface":".."}]`, []string{`"interface"`, `".."`}},
		{"interface colon", "a@eth0:1", []string{"eth0:1"}},
		{"empty interface", "a@", []string{`"@"`}},
		{"5-byte mac", `[{"name":"ok"},{"name":"macvlan","mac":"aa:bb:cc:dd:ee"}]`, []string{`entry 2 ("macvlan")`, `"mac" "aa:bb:cc:dd:ee" is not a 6-byte MAC address`}},
		{"guid as mac", `[{"name":"a","mac":"c2:11:22:33:44:55:66:77"}]`, []string{`"mac"`}},
		{"multicast mac", `[{"name":"a","mac":"01:00:5e:00:00:01"}]`, []string{"multicast"}},
		{"zero mac", `[{"name":"a","mac":"00:00:00:00:00:00"}]`, []string{"all zeros"}},
		{"6-byte guid", `[{"name":"a","infiniband-guid":"c2:11:22:33:44:55"}]`, []string{`"infiniband-guid"`, "8-byte"}},
		{"bad ip", `[{"name":"a","ips":["10.1.1.300"]}]`, []string{`"ips"`, "10.1.1.300"}},
		{"bad cidr", `[{"name":"a","ips":["10.1.1.1/33"]}]`, []string{`"ips"`, "10.1.1.1/33"}},
		{"zone ip", `[{"name":"a","ips":["fe80::1%eth0"]}]`, []string{`"ips"`}},
		{"port 0", `[{"name":"a","portMappings":[{"hostPort":0,"containerPort":80}]}]`, []string{`"portMappings"[0]`, `"hostPort" 0`}},
		{"port 70000", `[{"name":"a","portMappings":[{"hostPort":80,"containerPort":70000}]}]`, []string{`"containerPort" 70000`}},
		{"port missing", `[{"name":"a","portMappings":[{"containerPort":80}]}]`, []string{`"hostPort" 0`}},
		{"bad protocol", `[{"name":"a","portMappings":[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]}]`, []string{`"protocol" "icmp"`}},
		{"bad host ip", `[{"name":"a","portMappings":[{"hostPort":80,"containerPort":80,"hostIP":"1.2.3.0/24"}]}]`, []string{`"hostIP"`}},
		{"negative bandwidth", `[{"name":"a","bandwidth":{"egressBurst":-1}}]`, []string{`"bandwidth"`, `"egressBurst" -1`}},
		{"string bandwidth", `[{"name":"a","bandwidth":{"ingressRate":"1M"}}]`, []string{`"ingressRate" must be an integer`, `"1M"`}},
		{"ips and claim", `[{"name":"a","ips":["10.1.1.1/24"],"ipam-claim-reference":"c"}]`, []string{`"ipam-claim-reference"`, `"ips"`}},
		{"bad claim", `[{"name":"a","ipam-claim-reference":"Bad_Claim"}]`, []string{`"ipam-claim-reference"`, "Bad_Claim"}},
		{"bad gateway", `[{"name":"a","default-route":["10.0.0.0/8"]}]`, []string{`"default-route"`, "10.0.0.0/8"}},
		{"two v4 gateways", `[{"name":"a","default-route":["10.0.0.1","10.0.0.2"]}]`, []string{"10.0.0.1", "10.0.0.2", "family"}},
		{"device id space", `[{"name":"a","deviceID":"a b"}]`, []string{`"deviceID"`}},
		{"huge", huge, []string{"bytes", "limit"}},
		{"too many", many, []string{"65 networks", "limit"}},
		{"too many json", manyJSON, []string{"65 networks", "limit"}},
		{"bad dns label", "Macvlan", []string{`"name" "Macvlan"`}},
		{"underscore", "mac_vlan", []string{"mac_vlan"}},
		{"bad namespace", "Other/macvlan", []string{`"namespace" "Other"`}},
		{"dotted namespace", "a.b/macvlan", []string{`"namespace" "a.b"`}},
		{"traversal", "../x", []string{`"namespace" ".."`}},
		{"traversal json", `[{"name":"../x"}]`, []string{`"name" "../x"`}},
		{"traversal json ns", `[{"name":"x","namespace":".."}]`, []string{`"namespace" ".."`}},
		{"two slashes", "a/b/c", []string{"more than one \"/\""}},
		{"two ats", "a@b@c", []string{"more than one \"@\""}},
		{"stray comma", "a,,b", []string{"entry 2", "empty"}},
		{"trailing comma", "a,b,", []string{"entry 3", "empty"}},
		{"missing name", `[{"namespace":"x"}]`, []string{"entry 1", `"name" is missing`}},
		{"name not string", `[{"name":5}]`, []string{`"name" must be a string, got number 5`}},
		{"mac not string", `[{"name":"a","mac":5}]`, []string{`entry 1 ("a")`, `"mac" must be a string`}},
		{"ips not list", `[{"name":"a","ips":"10.1.1.1"}]`, []string{`"ips" must be a list of strings`}},
		{"cni-args not object", `[{"name":"a","cni-args":[1]}]`, []string{`"cni-args" must be an object`}},
		{"entry not object", `["a"]`, []string{"entry 1", "not a JSON object"}},
		{"not json", `[{"name":"a"`, []string{"not valid JSON"}},
		{"json string", `"a"`, []string{"JSON list"}},
		{"two objects", `{"name":"a"},{"name":"b"}`, []string{"not valid JSON"}},
		{"long name", strings.Repeat("a", 254), []string{`"name"`}},
		{"long namespace", strings.Repeat("a", 64) + "/x", []string{`"namespace"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNetworksAnnotation(tt.in, "pods")
			if err == nil {
				t.Fatalf("ParseNetworksAnnotation(%q) = %+v, want an error", truncate(tt.in, 100), got)
			}
			wantCode7(t, err, append([]string{"invalid networks annotation"}, tt.parts...)...)
		})
	}
}

func TestParseDefaultNetworkAnnotation(t *testing.T) {
	sel, err := ParseDefaultNetworkAnnotation("calico", "kube-system")
	if err != nil || sel == nil || !reflect.DeepEqual(*sel, NetworkSelection{Name: "calico", Namespace: "kube-system"}) {
		t.Errorf("list form: %+v, %v", sel, err)
	}
	sel, err = ParseDefaultNetworkAnnotation(`[{"name":"default","namespace":"ovn-kubernetes","ips":["10.0.0.5/24"]}]`, "kube-system")
	if err != nil || sel.Namespace != "ovn-kubernetes" || len(sel.IPs) != 1 {
		t.Errorf("json form: %+v, %v", sel, err)
	}
	sel, err = ParseDefaultNetworkAnnotation(`{"name":"flannel"}`, "kube-system")
	if err != nil || sel.Name != "flannel" || sel.Namespace != "kube-system" {
		t.Errorf("single object: %+v, %v", sel, err)
	}
	if sel, err := ParseDefaultNetworkAnnotation("  ", "kube-system"); sel != nil || err != nil {
		t.Errorf("empty: %+v, %v", sel, err)
	}
	_, err = ParseDefaultNetworkAnnotation("a,b", "kube-system")
	wantCode7(t, err, "default-network", "2 networks", "exactly one")
	_, err = ParseDefaultNetworkAnnotation("[]", "kube-system")
	wantCode7(t, err, "default-network", "no network")
	_, err = ParseDefaultNetworkAnnotation(`[{"name":"a","mac":"x"}]`, "kube-system")
	wantCode7(t, err, "default-network", `"mac" "x"`)
}
