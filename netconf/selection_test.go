package netconf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const macvlanConflist = `{"cniVersion":"1.0.0","name":"macvlan-net","plugins":[
  {"type":"macvlan","master":"eth9","args":{"cni":{"vlan":1,"keep":"me"},"other":{"x":1}},"ipam":{"type":"static"},
   "capabilities":{"ips":true,"mac":true}},
  {"type":"tuning","capabilities":{"mac":true}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}`

// pluginArgs decodes the conflist's plugins for assertions on their args.
func pluginArgs(t *testing.T, conflist []byte) []map[string]any {
	t.Helper()
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &list); err != nil {
		t.Fatalf("decode %s: %v", conflist, err)
	}
	return list.Plugins
}

func TestAttachmentForSelection(t *testing.T) {
	sel := NetworkSelection{
		Name: "macvlan", Namespace: "pods", InterfaceRequest: "data0",
		IPs: []string{"10.1.1.11/24", "2001:db8::5/64"}, MAC: "02:00:00:00:00:01",
		PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}},
		CNIArgs:      map[string]any{"vlan": json.Number("100"), "new": "v"},
		DefaultRoute: []string{"10.1.1.1"},
	}
	att, warnings, err := AttachmentForSelection(sel, macvlanConflist, &Config{ConfDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %q, want none: every request has a capability", warnings)
	}
	if att.NAD != "pods/macvlan" || att.Network != "macvlan-net" || att.IfName != "data0" || att.IsDefault {
		t.Errorf("attachment %+v", att)
	}
	if !reflect.DeepEqual(att.DefaultRoute, []string{"10.1.1.1"}) {
		t.Errorf("DefaultRoute %v", att.DefaultRoute)
	}
	wantArgs := [][2]string{{"IP", "10.1.1.11/24,2001:db8::5/64"}, {"MAC", "02:00:00:00:00:01"}}
	if !reflect.DeepEqual(att.CNIArgs, wantArgs) {
		t.Errorf("CNIArgs %v, want %v", att.CNIArgs, wantArgs)
	}
	rc, _ := json.Marshal(att.RuntimeConfig)
	wantRC := `{"ips":["10.1.1.11/24","2001:db8::5/64"],"mac":"02:00:00:00:00:01","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`
	if string(rc) != wantRC {
		t.Errorf("runtime config %s, want %s", rc, wantRC)
	}
	plugins := pluginArgs(t, att.Config)
	if len(plugins) != 3 {
		t.Fatalf("%d plugins", len(plugins))
	}
	first, _ := json.Marshal(plugins[0]["args"])
	if want := `{"cni":{"keep":"me","new":"v","vlan":100},"other":{"x":1}}`; string(first) != want {
		t.Errorf("first plugin args %s, want %s (annotation wins, other keys kept)", first, want)
	}
	if plugins[0]["master"] != "eth9" {
		t.Errorf("first plugin lost its keys: %v", plugins[0])
	}
	for i, p := range plugins[1:] {
		got, _ := json.Marshal(p["args"])
		if want := `{"cni":{"new":"v","vlan":100}}`; string(got) != want {
			t.Errorf("plugin %d args %s, want %s", i+1, got, want)
		}
	}
	if !strings.Contains(string(att.Config), `"name":"macvlan-net"`) {
		t.Errorf("config lost its name: %s", att.Config)
	}
}

func TestAttachmentForSelectionRequests(t *testing.T) {
	single := `{"cniVersion":"0.4.0","type":"host-device","capabilities":{"deviceID":true,"infinibandGUID":true,"bandwidth":true}}`
	sel := NetworkSelection{Name: "dev", Namespace: "pods", DeviceID: "0000:04:00.5",
		InfinibandGUID: "c2:11:22:33:44:55:66:77", Bandwidth: &Bandwidth{IngressRate: 1, IngressBurst: 2},
		IPs: []string{"10.0.0.1"}, MAC: "02:00:00:00:00:02"}
	att, warnings, err := AttachmentForSelection(sel, single, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	if att.Network != "dev" {
		t.Errorf("name %q not injected from the NAD", att.Network)
	}
	rc, _ := json.Marshal(att.RuntimeConfig)
	want := `{"bandwidth":{"ingressRate":1,"ingressBurst":2,"egressRate":0,"egressBurst":0},"deviceID":"0000:04:00.5","infinibandGUID":"c2:11:22:33:44:55:66:77","ips":["10.0.0.1"],"mac":"02:00:00:00:00:02"}`
	if string(rc) != want {
		t.Errorf("runtime config %s, want %s", rc, want)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], `"ips"`) || !strings.Contains(warnings[1], `"mac"`) {
		t.Errorf("warnings %q, want one for ips and one for mac", warnings)
	}
	if att.RuntimeConfig == nil || att.CNIArgs == nil {
		t.Errorf("requests lost: %+v", att)
	}

	plain, _, err := AttachmentForSelection(NetworkSelection{Name: "dev", Namespace: "pods"}, single, &Config{})
	if err != nil || plain.RuntimeConfig != nil || plain.CNIArgs != nil || plain.IfName != "" {
		t.Errorf("no requests gave %+v, %v", plain, err)
	}
}

func TestAttachmentForSelectionErrors(t *testing.T) {
	bridge := `{"cniVersion":"1.0.0","name":"br","type":"bridge"}`
	tests := []struct {
		name   string
		sel    NetworkSelection
		config string
		parts  []string
	}{
		// With strictCapabilities; TestCapabilityLeftOut is the default.
		{"portMappings", NetworkSelection{Name: "br", Namespace: "ns", PortMappings: []PortMapping{{HostPort: 1, ContainerPort: 1}}}, bridge, []string{"ns/br", `"portMappings"`, "bridge", "strictCapabilities"}},
		{"bandwidth", NetworkSelection{Name: "br", Namespace: "ns", Bandwidth: &Bandwidth{}}, bridge, []string{"ns/br", `"bandwidth"`}},
		{"guid", NetworkSelection{Name: "br", Namespace: "ns", InfinibandGUID: "c2:11:22:33:44:55:66:77"}, bridge, []string{"ns/br", `"infiniband-guid"`, `"infinibandGUID"`}},
		{"deviceID", NetworkSelection{Name: "br", Namespace: "ns", DeviceID: "0000:04:00.5"}, bridge, []string{"ns/br", `"deviceID"`}},
		{"bad config", NetworkSelection{Name: "br", Namespace: "ns"}, `{"cniVersion":`, []string{"ns/br", "spec.config"}},
		{"no type", NetworkSelection{Name: "br", Namespace: "ns"}, `{"cniVersion":"1.0.0"}`, []string{"ns/br", "type"}},
		{"missing in confDir", NetworkSelection{Name: "gone", Namespace: "ns"}, "  ", []string{"ns/gone", "spec.config is empty", `"gone"`}},
		{"bad selection", NetworkSelection{Name: "../x", Namespace: "ns"}, bridge, []string{`"../x"`}},
		{"args not object", NetworkSelection{Name: "br", Namespace: "ns", CNIArgs: map[string]any{"a": 1}},
			`{"cniVersion":"1.0.0","type":"bridge","args":"str"}`, []string{"ns/br", "cni-args", `"args"`}},
		{"args.cni not object", NetworkSelection{Name: "br", Namespace: "ns", CNIArgs: map[string]any{"a": 1}},
			`{"cniVersion":"1.0.0","type":"bridge","args":{"cni":[]}}`, []string{"ns/br", `"cni"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			att, _, err := AttachmentForSelection(tt.sel, tt.config, &Config{ConfDir: t.TempDir(), StrictCapabilities: true})
			if err == nil {
				t.Fatalf("got %+v, want an error", att)
			}
			wantCode7(t, err, tt.parts...)
		})
	}
}

// TestCapabilityLeftOut: by default, a request whose capability no plugin of
// the network declares is left out of the runtime config (a deviceID does
// not pin the device either), and named in Unserved; the network is still
// attached, with the requests it can carry.
func TestCapabilityLeftOut(t *testing.T) {
	bridge := `{"cniVersion":"1.0.0","name":"br","plugins":[{"type":"bridge","capabilities":{"ips":true}},{"type":"tuning"}]}`
	sel := NetworkSelection{Name: "br", Namespace: "ns", IPs: []string{"10.0.0.1/24"},
		PortMappings: []PortMapping{{HostPort: 1, ContainerPort: 1, Protocol: "tcp"}}, Bandwidth: &Bandwidth{IngressRate: 1},
		InfinibandGUID: "c2:11:22:33:44:55:66:77", DeviceID: "0000:04:00.5"}
	att, _, err := AttachmentForSelection(sel, bridge, &Config{})
	if err != nil {
		t.Fatalf("attachment refused: %v", err)
	}
	rc, _ := json.Marshal(att.RuntimeConfig)
	if want := `{"ips":["10.0.0.1/24"]}`; string(rc) != want {
		t.Errorf("runtime config %s, want %s: the undeclared requests are left out", rc, want)
	}
	if att.DeviceID != "" {
		t.Errorf("DeviceID %q: a deviceID left out does not choose the device", att.DeviceID)
	}
	var got []string
	for _, u := range att.Unserved {
		got = append(got, u.Request+"/"+u.Capability)
		msg := u.Message("ns/br (net1)")
		for _, part := range []string{"ns/br (net1)", `"` + u.Request + `"`, `"` + u.Capability + `"`, "bridge, tuning"} {
			if !strings.Contains(msg, part) {
				t.Errorf("message %q does not name %q", msg, part)
			}
		}
	}
	want := []string{"portMappings/portMappings", "bandwidth/bandwidth", "infiniband-guid/infinibandGUID", "deviceID/deviceID"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unserved %v, want %v", got, want)
	}
	// Unserved is not part of the record.
	if b, _ := json.Marshal(att); strings.Contains(string(b), "infiniband-guid") {
		t.Errorf("record form %s holds Unserved", b)
	}
}

func TestAttachmentForSelectionConfDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("10-a.conf", `{"cniVersion":"1.0.0","name":"stored","type":"bridge"}`)
	write("20-b.conflist", `{"cniVersion":"1.0.0","name":"stored","plugins":[{"type":"ptp"},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	sel := NetworkSelection{Name: "stored", Namespace: "ns", PortMappings: []PortMapping{{HostPort: 80, ContainerPort: 80}}}
	att, _, err := AttachmentForSelection(sel, "", &Config{ConfDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if att.NAD != "ns/stored" || !att.Capabilities["portMappings"] || !strings.Contains(string(att.Config), `"ptp"`) {
		t.Errorf("want the conflist from confDir, got %+v", att)
	}
}

func TestMergeCNIArgsKeepsNull(t *testing.T) {
	b, err := mergeCNIArgs([]byte(`{"name":"n","plugins":[{"type":"a","args":null}]}`), map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if got := pluginArgs(t, b)[0]["args"]; !reflect.DeepEqual(got, map[string]any{"cni": map[string]any{"k": "v"}}) {
		t.Errorf("args %v", got)
	}
}
