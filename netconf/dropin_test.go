package netconf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestNetworkVersionAsLibcni: the version a network runs in is the one
// libcni resolves from the same bytes: no cniVersion at all, or a CNI 1.1
// conflist with only "cniVersions" (versions above libcni's own skipped).
// Before, both were refused ("has no cniVersion").
func TestNetworkVersionAsLibcni(t *testing.T) {
	for _, in := range []string{
		`{"name":"n","plugins":[{"type":"bridge"}]}`,
		`{"name":"n","cniVersions":["0.4.0","1.1.0"],"plugins":[{"type":"bridge"}]}`,
		`{"name":"n","cniVersions":["1.0.0","9.0.0"],"plugins":[{"type":"bridge"}]}`,
		`{"name":"n","cniVersion":"1.1.0","cniVersions":["0.3.1"],"plugins":[{"type":"bridge"}]}`,
		`{"name":"n","cniVersion":"0.3.1","cniVersions":["1.0.0"],"plugins":[{"type":"bridge"}]}`,
		`{"name":"n","cniVersions":[],"plugins":[{"type":"bridge"}]}`,
	} {
		want, err := libcni.NetworkConfFromBytes([]byte(in))
		if err != nil {
			t.Fatalf("libcni refuses %s: %v", in, err)
		}
		n, err := ParseNetwork([]byte(in), "")
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if n.CNIVersion != want.CNIVersion {
			t.Errorf("%s: version %q, libcni's %q", in, n.CNIVersion, want.CNIVersion)
		}
		// The list that libcni is handed resolves to the same version.
		got, err := libcni.NetworkConfFromBytes(n.Bytes)
		if err != nil || got.CNIVersion != want.CNIVersion {
			t.Errorf("%s: the stored list %s runs in %q (%v), want %q", in, n.Bytes, got.CNIVersion, err, want.CNIVersion)
		}
	}

	// A NAD's single config without cniVersion: its plugin is given none,
	// as libcni gives it none, and the network counts as CNI 0.1.0.
	n, err := NetworkOfNAD("ns/old", "old", `{"type":"bridge","bridge":"br1"}`, nil, nil)
	if err != nil {
		t.Fatalf("a NAD without cniVersion: %v", err)
	}
	if n.CNIVersion != "" || n.RunVersion() != "0.1.0" {
		t.Errorf("version %q, runs in %q; want none, 0.1.0", n.CNIVersion, n.RunVersion())
	}
	var list map[string]json.RawMessage
	if err := json.Unmarshal(n.Bytes, &list); err != nil {
		t.Fatal(err)
	}
	if _, ok := list["cniVersion"]; ok {
		t.Errorf("the wrapped list %s gained a cniVersion", n.Bytes)
	}
	if _, err := NetworkOfNAD("ns/new", "new", `{"name":"new","cniVersions":["1.0.0","1.1.0"],"plugins":[{"type":"bridge"}]}`, nil, nil); err != nil {
		t.Errorf("a conflist with cniVersions only: %v", err)
	}
}

// TestUnknownLogLevelIsAWarning: a logLevel manifold does not know is a
// warning, and the default level, on every verb (Multus keeps its default
// too). Before, every ADD and DEL failed with code 7.
func TestUnknownLogLevelIsAWarning(t *testing.T) {
	in := []byte(`{"cniVersion":"1.0.0","clusterNetwork":"calico","logLevel":"trace"}`)
	for name, parse := range map[string]func([]byte) (*Config, error){"ParseConfig": ParseConfig, "ParseConfigForDel": ParseConfigForDel} {
		c, err := parse(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.LogLevel != "" || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `"trace"`) || !strings.Contains(c.Warnings[0], "logLevel") {
			t.Errorf("%s: level %q, warnings %q; want the default level and one warning naming logLevel and trace", name, c.LogLevel, c.Warnings)
		}
	}
}

// TestParseConfigForDel: DEL works around each config problem it can do
// without, with a warning naming the key, and takes the key's default;
// ADD still refuses them. What DEL cannot do without stays an error.
func TestParseConfigForDel(t *testing.T) {
	base := `"cniVersion":"1.0.0","clusterNetwork":"calico"`
	soft := []struct{ name, in, key string }{
		{"no default network", `{"cniVersion":"1.0.0"}`, "clusterNetwork"},
		{"empty defaultNetworks entry", `{` + base + `,"defaultNetworks":[" "]}`, "defaultNetworks"},
		{"bad auxiliary chain", `{` + base + `,"auxiliaryCNIChainName":"a b"}`, "auxiliaryCNIChainName"},
		{"relative binDir", `{` + base + `,"binDir":"bin"}`, "binDir"},
		{"relative cniDir", `{` + base + `,"cniDir":"x"}`, "cniDir"},
		{"relative multusCNIDir", `{` + base + `,"multusCNIDir":"x"}`, "multusCNIDir"},
		{"relative multusConfDir", `{` + base + `,"multusConfDir":"x"}`, "multusConfDir"},
		{"negative maxAge", `{` + base + `,"logOptions":{"maxAge":-1}}`, "logOptions.maxAge"},
		{"bad apiTimeout", `{` + base + `,"apiTimeout":"soon"}`, "apiTimeout"},
		{"zero callTimeout", `{` + base + `,"callTimeout":"0s"}`, "callTimeout"},
	}
	for _, tt := range soft {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseConfig([]byte(tt.in)); err == nil {
				t.Errorf("ADD's ParseConfig takes %s", tt.in)
			}
			c, err := ParseConfigForDel([]byte(tt.in))
			if err != nil {
				t.Fatalf("DEL refuses %s: %v", tt.in, err)
			}
			if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], tt.key) {
				t.Errorf("warnings %q, want one naming %s", c.Warnings, tt.key)
			}
			if c.BinDir != DefaultBinDir && tt.key == "binDir" || c.CNIDir != DefaultCNIDir || c.CallTimeout != DefaultCallTimeout && tt.key == "callTimeout" ||
				c.APITimeout != DefaultAPITimeout || c.LogOptions != nil || c.MultusCNIDir != DefaultMultusCNIDir || c.MultusConfDir != DefaultMultusConfDir {
				t.Errorf("the key did not take its default: %+v", c)
			}
		})
	}
	for _, in := range []string{
		`{`,                                     // not JSON
		`{"clusterNetwork":"calico"}`,           // no version to answer in
		`{"cniVersion":"9.9.9","delegates":[]}`, // nor here
		`{` + base + `,"allowedPluginTypes":["../x"]}`,
	} {
		if _, err := ParseConfigForDel([]byte(in)); err == nil {
			t.Errorf("DEL takes %s", in)
		}
	}
}

// TestEmptyDefaultRouteSelection: "default-route": [] is the spec's "this
// network's own default routes" (DefaultRouteOwn), not an error, and not
// the same as no "default-route" at all.
func TestEmptyDefaultRouteSelection(t *testing.T) {
	conf, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","clusterNetwork":"calico"}`))
	if err != nil {
		t.Fatal(err)
	}
	nad := `{"cniVersion":"1.0.0","type":"bridge"}`
	for in, want := range map[string]bool{
		`[{"name":"a","default-route":[]}]`: true,
		`[{"name":"a"}]`:                    false,
	} {
		sels, err := ParseNetworksAnnotation(in, "pods")
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		att, _, err := AttachmentForSelection(sels[0], nad, conf)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if att.DefaultRouteOwn != want || att.DefaultRoute != nil || att.WantsDefaultRoute() != want {
			t.Errorf("%s: DefaultRouteOwn %v, DefaultRoute %v; want %v, none", in, att.DefaultRouteOwn, att.DefaultRoute, want)
		}
	}
}

// TestConfDirsMultusAfterOwn: networks named by name, and NADs with an
// empty spec.config, are looked up in confDir and then in Multus's
// default confDir; manifold's own file wins, and "none" turns Multus's
// directory off. Before, Multus's directory was not searched.
func TestConfDirsMultusAfterOwn(t *testing.T) {
	own, multus := t.TempDir(), t.TempDir()
	write := func(dir, file, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(multus, "10-br1.conf", `{"cniVersion":"1.0.0","name":"br1","type":"bridge"}`)
	write(multus, "10-both.conf", `{"cniVersion":"1.0.0","name":"both","type":"bridge"}`)
	write(own, "10-both.conf", `{"cniVersion":"1.0.0","name":"both","type":"macvlan"}`)

	conf, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","clusterNetwork":"calico","confDir":"` + own + `","multusConfDir":"` + multus + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := conf.ConfDirs(); !slices.Equal(got, []string{own, multus}) {
		t.Fatalf("ConfDirs %v", got)
	}
	n, err := NetworkOfNAD("pods/br1", "br1", "", conf.ConfDirs(), nil)
	if err != nil || n.Types[0] != "bridge" {
		t.Fatalf("br1 from Multus's dir: %v, %v", n, err)
	}
	n, err = NetworkOfNAD("pods/both", "both", "", conf.ConfDirs(), nil)
	if err != nil || n.Types[0] != "macvlan" {
		t.Fatalf("both: %v, %v; want manifold's own (macvlan)", n, err)
	}
	_, err = NetworkOfNAD("pods/none", "none", "", conf.ConfDirs(), nil)
	wantCode7(t, err, own, multus, `"none"`)

	for in, want := range map[string][]string{
		`"confDir":"` + own + `","multusConfDir":"none"`:         {own},
		`"confDir":"` + own + `","multusConfDir":"` + own + `/"`: {own},
		`"confDir":"/etc/cni/multus/net.d"`:                      {"/etc/cni/multus/net.d"},
		`"confDir":"` + own + `"`:                                {own, DefaultMultusConfDir},
	} {
		c, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","clusterNetwork":"calico",` + in + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ConfDirs(); !slices.Equal(got, want) {
			t.Errorf("%s: ConfDirs %v, want %v", in, got, want)
		}
	}
}
