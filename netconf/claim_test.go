package netconf

import (
	"strings"
	"testing"
)

func TestParseClaimRef(t *testing.T) {
	for _, tc := range []struct {
		in       string
		claim    string
		request  string
		errParts []string
	}{
		{in: "nics", claim: "nics"},
		{in: " nics/vf ", claim: "nics", request: "vf"},
		{in: "nics/vf/fast", claim: "nics", request: "vf/fast"},
		{in: "gen.claim-1/req", claim: "gen.claim-1", request: "req"},
		{in: "nics/", errParts: []string{AnnotResourceClaim, "names no request"}},
		{in: "nics/vf/fast/x", errParts: []string{"more than <claim>/<request>/<subrequest>"}},
		{in: "Nics", errParts: []string{AnnotResourceClaim, `"Nics"`}},
		{in: "", errParts: []string{AnnotResourceClaim}},
		{in: "nics/V_F", errParts: []string{"request", `"V_F"`}},
		{in: "../x", errParts: []string{`".."`}},
	} {
		ref, err := ParseClaimRef(tc.in)
		if tc.errParts != nil {
			if err == nil {
				t.Errorf("%q: no error, want one", tc.in)
				continue
			}
			for _, p := range tc.errParts {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("%q: error %q does not say %q", tc.in, err, p)
				}
			}
			continue
		}
		if err != nil || ref.Claim != tc.claim || ref.Request != tc.request {
			t.Errorf("%q: %+v, %v; want %s / %s", tc.in, ref, err, tc.claim, tc.request)
		}
		if want := strings.TrimSpace(tc.in); ref.String() != want {
			t.Errorf("%q: String() = %q", tc.in, ref.String())
		}
	}
}

func TestIsDevicePluginResource(t *testing.T) {
	for in, want := range map[string]bool{"intel.com/sriov_vf": true, "nics": false, "p-nics-abc12": false, "a.b": false} {
		if got := IsDevicePluginResource(in); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

func TestParseDeviceKeys(t *testing.T) {
	m, err := ParseDeviceKeys(`{"device":"dra.example.com/ifName","hwaddr":"mac"}`)
	if err != nil || len(m) != 2 || m["device"] != "dra.example.com/ifName" || m["hwaddr"] != "mac" {
		t.Errorf("valid keys: %v, %v", m, err)
	}
	for _, tc := range []struct{ in, says string }{
		{`["device"]`, "not a JSON object"},
		{`{}`, "maps no key"},
		{`{"type":"a"}`, `plugin key "type" cannot be set`},
		{`{"ipam":"a"}`, `plugin key "ipam"`},
		{`{"runtimeConfig":"a"}`, `"runtimeConfig"`},
		{`{"device":"bad domain/ifName"}`, "not a DNS subdomain"},
		{`{"device":"dra.example.com/9lives"}`, "not a C identifier"},
		{`{"device":"dra.example.com/"}`, "not a C identifier"},
		{`{"device":"` + strings.Repeat("a", 33) + `"}`, "at most 32"},
	} {
		if _, err := ParseDeviceKeys(tc.in); err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), AnnotDeviceKeys) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", tc.in, err, AnnotDeviceKeys, tc.says)
		}
	}
	var many []string
	for i := range 17 {
		many = append(many, `"k`+strings.Repeat("x", i)+`":"a"`)
	}
	if _, err := ParseDeviceKeys("{" + strings.Join(many, ",") + "}"); err == nil || !strings.Contains(err.Error(), "more than 16") {
		t.Errorf("17 keys: %v", err)
	}
}
