package netconf

import (
	"strings"
	"testing"
)

// A network from a NAD may not run a meta-plugin, as a plugin or as a
// plugin's IPAM, in a single conf or anywhere in a conflist; allowedPluginTypes
// narrows what it may run further.
func TestAttachmentForSelectionPluginTypes(t *testing.T) {
	sel := NetworkSelection{Name: "n", Namespace: "pods"}
	for _, tc := range []struct {
		name    string
		config  string
		allowed []string
		want    []string // substrings of the error; nil: accepted
	}{
		{"manifold as a single conf", `{"cniVersion":"1.0.0","type":"manifold","binDir":"/tmp/x","delegates":[{"type":"x"}]}`, nil,
			[]string{"pods/n", `type "manifold"`, "meta-plugin"}},
		{"multus in a conflist's second plugin", `{"cniVersion":"1.0.0","name":"l","plugins":[{"type":"bridge"},{"type":"multus"}]}`, nil,
			[]string{"pods/n", "plugin 1", `"multus"`}},
		{"manifold-shim as IPAM", `{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"manifold-shim","binDir":"/tmp/x"}}`, nil,
			[]string{"pods/n", `ipam type "manifold-shim"`}},
		{"multus-shim", `{"cniVersion":"1.0.0","type":"multus-shim"}`, nil, []string{`"multus-shim"`}},
		{"a meta-plugin even when listed", `{"cniVersion":"1.0.0","type":"manifold"}`, []string{"manifold"}, []string{"meta-plugin"}},
		{"a type the policy does not list", `{"cniVersion":"1.0.0","type":"bridge","ipam":{"type":"host-local"}}`, []string{"macvlan", "host-local"},
			[]string{"pods/n", `type "bridge"`, "allowedPluginTypes", "macvlan, host-local"}},
		{"an IPAM type the policy does not list", `{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"dhcp"}}`, []string{"macvlan", "host-local"},
			[]string{`ipam type "dhcp"`, "allowedPluginTypes"}},
		{"a path as IPAM type", `{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"../../tmp/x"}}`, nil,
			[]string{"../../tmp/x", "not a plain binary name"}},
		{"listed types", `{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"host-local"}}`, []string{"macvlan", "host-local"}, nil},
		{"no policy", `{"cniVersion":"1.0.0","name":"l","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"tuning"}]}`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := AttachmentForSelection(sel, tc.config, &Config{AllowedPluginTypes: tc.allowed})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if Code(err) != 7 {
				t.Errorf("code %d, want 7: %v", Code(err), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestConfigAllowedPluginTypes(t *testing.T) {
	base := `{"cniVersion":"1.0.0","name":"m","type":"manifold","clusterNetwork":"/etc/x.conflist","allowedPluginTypes":`
	for raw, want := range map[string]string{
		`["macvlan","manifold"]`: `"manifold" is a meta-plugin`,
		`["../bin/x"]`:           `"../bin/x" is not a plain binary name`,
		`[""]`:                   `allowedPluginTypes"[0]`,
	} {
		_, err := ParseConfig([]byte(base + raw + "}"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("allowedPluginTypes %s: error %v, want one naming %q", raw, err, want)
		}
	}
	c, err := ParseConfig([]byte(base + `["macvlan","host-local"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.AllowedPluginTypes, ",") != "macvlan,host-local" {
		t.Errorf("AllowedPluginTypes %v", c.AllowedPluginTypes)
	}
}
