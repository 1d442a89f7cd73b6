package netconf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseNetworkConf(t *testing.T) {
	n, err := ParseNetwork([]byte(`{"cniVersion":"0.4.0","type":"macvlan","master":"eth1","disableCheck":true,
	  "capabilities":{"mac":true,"ips":false}}`), "from-nad")
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "from-nad" || n.CNIVersion != "0.4.0" || !reflect.DeepEqual(n.Types, []string{"macvlan"}) {
		t.Errorf("network %+v", n)
	}
	if !reflect.DeepEqual(n.Capabilities, map[string]bool{"mac": true}) {
		t.Errorf("capabilities %v: a false capability is not declared", n.Capabilities)
	}
	var list map[string]any
	if err := json.Unmarshal(n.Bytes, &list); err != nil {
		t.Fatal(err)
	}
	if list["name"] != "from-nad" || list["cniVersion"] != "0.4.0" || list["disableCheck"] != true {
		t.Errorf("conflist top %v", list)
	}
	plugins, _ := list["plugins"].([]any)
	if len(plugins) != 1 || plugins[0].(map[string]any)["master"] != "eth1" {
		t.Errorf("the single config must become the only plugin, keys intact: %v", list["plugins"])
	}
}

func TestParseNetworkConflist(t *testing.T) {
	raw := `{"cniVersion":"1.0.0","name":"own","plugins":[
	  {"type":"bridge","capabilities":{"ips":true}},
	  {"type":"portmap","capabilities":{"portMappings":true}},
	  {"type":"bandwidth","capabilities":{"bandwidth":true,"ips":true}}]}`
	n, err := ParseNetwork([]byte(raw), "nad-name")
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "own" {
		t.Errorf("name %q: the config's own name wins over the NAD's", n.Name)
	}
	if want := map[string]bool{"ips": true, "portMappings": true, "bandwidth": true}; !reflect.DeepEqual(n.Capabilities, want) {
		t.Errorf("capabilities %v, want the union %v", n.Capabilities, want)
	}
	if want := []string{"bridge", "portmap", "bandwidth"}; !reflect.DeepEqual(n.Types, want) {
		t.Errorf("types %v", n.Types)
	}
	again, err := ParseNetwork(n.Bytes, "")
	if err != nil || again.Name != "own" || !reflect.DeepEqual(again.Types, n.Types) {
		t.Errorf("re-parsing Bytes: %+v, %v", again, err)
	}
	// A conflist without a name gets the injected one.
	n, err = ParseNetwork([]byte(`{"cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}`), "injected")
	if err != nil || n.Name != "injected" || !strings.Contains(string(n.Bytes), `"name":"injected"`) {
		t.Errorf("injection: %+v, %v", n, err)
	}
}

func TestParseNetworkErrors(t *testing.T) {
	tests := []struct {
		name, in, defName, part string
	}{
		{"not json", `{`, "x", "parse network config"},
		{"no name", `{"cniVersion":"1.0.0","type":"a"}`, "", `"name"`},
		{"name not string", `{"name":1,"cniVersion":"1.0.0","type":"a"}`, "", `"name" must be a string`},
		{"bad cniVersions", `{"name":"n","cniVersions":["1.0.0","x"],"plugins":[{"type":"a"}]}`, "", `"cniVersions"`},
		{"cniVersions not list", `{"name":"n","cniVersions":"1.0.0","plugins":[{"type":"a"}]}`, "", `"cniVersions"`},
		{"no type", `{"name":"n","cniVersion":"1.0.0"}`, "", `"type"`},
		{"type path", `{"name":"n","cniVersion":"1.0.0","type":"../bin/sh"}`, "", "plain binary name"},
		{"type dotdot", `{"name":"n","cniVersion":"1.0.0","type":".."}`, "", "plain binary name"},
		{"empty plugins", `{"name":"n","cniVersion":"1.0.0","plugins":[]}`, "", `"plugins" is empty`},
		{"plugins not list", `{"name":"n","cniVersion":"1.0.0","plugins":{}}`, "", `"plugins"`},
		{"plugin without type", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"a"},{}]}`, "", "plugin 1"},
		{"bad capabilities", `{"name":"n","cniVersion":"1.0.0","type":"a","capabilities":{"mac":"yes"}}`, "", `"capabilities"`},
		{"bad name", `{"name":"a b","cniVersion":"1.0.0","type":"a"}`, "", "not valid"},
		{"bad injected name", `{"cniVersion":"1.0.0","type":"a"}`, "\xff", "not valid"},
		{"too big", `{"x":"` + strings.Repeat("a", MaxConfigBytes) + `"}`, "x", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseNetwork([]byte(tt.in), tt.defName)
			if err == nil {
				t.Fatalf("got %+v, want an error", n)
			}
			if !strings.Contains(err.Error(), tt.part) {
				t.Errorf("error %q does not mention %q", err, tt.part)
			}
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func conf(name, typ string) string {
	return `{"cniVersion":"1.0.0","name":"` + name + `","type":"` + typ + `"}`
}

func conflist(name, typ string) string {
	return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"` + typ + `"}]}`
}

func TestFindNetworkInDir(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"00-broken.conflist": `{"name":"net"`, // skipped, and hides nothing
		"10-net.conf":        conf("net", "conf-first"),
		"20-net.json":        conf("net", "json-second"),
		"30-net.conflist":    conflist("net", "list-wins"),
		"40-net.conflist":    conflist("net", "list-later"),
		"50-only.json":       conf("only", "json-only"),
		"60-only.conf":       conf("only", "conf-later"),
		"70-other.conf":      conf("other", "x"),
		"notes.txt":          conf("net", "not-a-config"),
		"sub.conf/x.conf":    conf("net", "in-a-dir"),
	})
	for _, tt := range []struct{ name, wantType string }{
		{"net", "list-wins"},
		{"only", "json-only"},
		{"other", "x"},
		{"missing", ""},
	} {
		n, err := FindNetworkInDir(dir, tt.name)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := ""
		if n != nil {
			got = n.Types[0]
		}
		if got != tt.wantType {
			t.Errorf("FindNetworkInDir(%q) found type %q, want %q", tt.name, got, tt.wantType)
		}
	}
	if n, err := FindNetworkInDir(filepath.Join(dir, "nope"), "net"); n != nil || err != nil {
		t.Errorf("a missing dir gives nil, nil; got %v, %v", n, err)
	}
}

func TestLoadNetworkPath(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"net.d/20-b.conf":     conf("b", "second"),
		"net.d/10-a.conflist": conflist("a", "first"),
		"net.d/05-x.txt":      "ignored",
		"empty/readme":        "",
		"single.conf":         conf("s", "single"),
		"broken.conf":         `{`,
	})
	for _, tt := range []struct{ path, wantName string }{
		{"net.d", "a"},
		{"single.conf", "s"},
	} {
		n, err := LoadNetworkPath(filepath.Join(dir, tt.path))
		if err != nil || n.Name != tt.wantName {
			t.Errorf("LoadNetworkPath(%s) = %+v, %v; want network %q", tt.path, n, err, tt.wantName)
		}
	}
	for _, p := range []string{"empty", "missing.conf", "broken.conf"} {
		if n, err := LoadNetworkPath(filepath.Join(dir, p)); err == nil {
			t.Errorf("LoadNetworkPath(%s) = %+v, want an error", p, n)
		} else if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name the path %s", err, p)
		}
	}
}
