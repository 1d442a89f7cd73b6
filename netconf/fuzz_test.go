package netconf

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them as
// ordinary cases, `go test -fuzz=FuzzX` mutates them.

// requireCode7 fails unless err is a CNI error with code 7 and a message.
func requireCode7(t *testing.T, err error) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || e.Msg == "" {
		t.Fatalf("error %v (%T) is not a code-7 CNI error with a message", err, err)
	}
}

// allCaps declares every capability an annotation can ask for, so that every
// valid selection must turn into an attachment.
const allCaps = `{"cniVersion":"1.0.0","name":"all","plugins":[{"type":"a","args":{"cni":{"keep":1}},
  "capabilities":{"portMappings":true,"bandwidth":true,"ips":true,"mac":true,"infinibandGUID":true,"deviceID":true}}]}`

func FuzzParseNetworksAnnotation(f *testing.F) {
	f.Fuzz(func(t *testing.T, value string) {
		sels, err := ParseNetworksAnnotation(value, "pods")
		if err != nil {
			requireCode7(t, err)
			if !strings.HasPrefix(err.Error(), "invalid networks annotation: ") {
				t.Fatalf("error %q does not say which annotation", err)
			}
			return
		}
		if len(value) > MaxAnnotationBytes || len(sels) > MaxNetworkSelections {
			t.Fatalf("accepted %d bytes, %d networks: over the limits", len(value), len(sels))
		}
		for i := range sels {
			checkSelection(t, &sels[i])
		}
		def, err := ParseDefaultNetworkAnnotation(value, "kube-system")
		switch {
		case err != nil:
			requireCode7(t, err)
			if len(sels) == 1 {
				t.Fatalf("one network accepted as networks but refused as default: %v", err)
			}
		case def == nil:
			if strings.TrimSpace(value) != "" {
				t.Fatalf("non-empty value %q gave no default network and no error", value)
			}
		default:
			if len(sels) != 1 || def.Name != sels[0].Name {
				t.Fatalf("default network %+v from %d networks", def, len(sels))
			}
		}
	})
}

// checkSelection asserts what a parsed selection promises to later stages.
func checkSelection(t *testing.T, s *NetworkSelection) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatalf("parsed selection %+v does not validate: %v", s, err)
	}
	if s.Namespace == "" || strings.ContainsAny(s.Name+s.Namespace, "/\\ ") || strings.Contains(s.Name, "..") {
		t.Fatalf("unsafe name %q/%q", s.Namespace, s.Name)
	}
	if s.InterfaceRequest != "" {
		if err := ValidateIfName(s.InterfaceRequest); err != nil {
			t.Fatalf("interface %q: %v", s.InterfaceRequest, err)
		}
	}
	if s.IPAMClaimReference != "" && len(s.IPs) > 0 {
		t.Fatal("ips together with ipam-claim-reference")
	}
	for _, p := range s.PortMappings {
		if !slices.Contains([]string{"tcp", "udp", "sctp"}, p.Protocol) {
			t.Fatalf("protocol %q not normalised", p.Protocol)
		}
	}
	att, _, err := AttachmentForSelection(*s, allCaps, &Config{})
	if err != nil {
		t.Fatalf("valid selection %+v refused by a network with every capability: %v", s, err)
	}
	if att.IfName != s.InterfaceRequest || att.NAD != s.Namespace+"/"+s.Name {
		t.Fatalf("attachment %+v does not match selection %+v", att, s)
	}
	if _, err := ParseNetwork(att.Config, ""); err != nil {
		t.Fatalf("attachment config does not parse: %v\n%s", err, att.Config)
	}
	// The attachment goes into the scratch record as JSON.
	if _, err := json.Marshal(att); err != nil {
		t.Fatalf("attachment does not encode: %v", err)
	}
	for _, kv := range att.CNIArgs {
		if strings.ContainsAny(kv[1], ";=") {
			t.Fatalf("CNI_ARGS value %q would break the K=V;K=V format", kv[1])
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			requireCode7(t, err)
			return
		}
		if !slices.Contains(version.All.SupportedVersions(), c.CNIVersion) {
			t.Fatalf("accepted cniVersion %q", c.CNIVersion)
		}
		if c.ClusterNetwork == "" && len(c.Delegates) == 0 {
			t.Fatal("accepted a config with no default network")
		}
		for _, p := range []string{c.ConfDir, c.CNIDir, c.BinDir} {
			if !filepath.IsAbs(p) {
				t.Fatalf("accepted relative path %q", p)
			}
		}
		if c.MultusNamespace == "" || c.SystemNamespaces == nil {
			t.Fatal("defaults not filled in")
		}
		for _, d := range []time.Duration{c.APITimeout, c.PodWaitTimeout, c.ReadinessTimeout, c.LockTimeout} {
			if d < 0 || d > time.Hour {
				t.Fatalf("accepted duration %v", d)
			}
		}
		if _, err := ParseLogLevel(c.LogLevel); err != nil {
			t.Fatalf("accepted log level %q", c.LogLevel)
		}
		if o := c.LogOptions; o != nil {
			for _, v := range []*int{o.MaxAge, o.MaxSize, o.MaxBackups} {
				if v != nil && *v < 0 {
					t.Fatalf("accepted negative log option %d", *v)
				}
			}
		}
		for _, d := range c.DefaultNetworks {
			if strings.TrimSpace(d) == "" {
				t.Fatal("accepted an empty defaultNetworks entry")
			}
		}
	})
}

func FuzzParseNetwork(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, defaultName string) {
		n, err := ParseNetwork(data, defaultName)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if n.Name == "" || len(n.Types) == 0 || n.Capabilities == nil {
			t.Fatalf("incomplete network %+v", n)
		}
		// No version is a network that gives none, which runs as 0.1.0
		// (RunVersion), as libcni runs it; a version given is never lost.
		if n.CNIVersion == "" {
			var top map[string]json.RawMessage
			var v string
			if json.Unmarshal(data, &top) == nil && json.Unmarshal(top["cniVersion"], &v) == nil && v != "" {
				t.Fatalf("network %+v lost the cniVersion %q its config gives", n, v)
			}
		}
		for _, typ := range n.Types {
			if typ == "" || typ == "." || typ == ".." || strings.ContainsAny(typ, "/\\") {
				t.Fatalf("accepted plugin type %q", typ)
			}
		}
		var list struct {
			Name    string            `json:"name"`
			Plugins []json.RawMessage `json:"plugins"`
		}
		if err := json.Unmarshal(n.Bytes, &list); err != nil || list.Name != n.Name || len(list.Plugins) != len(n.Types) {
			t.Fatalf("Bytes is not the conflist of %+v: %v\n%s", n, err, n.Bytes)
		}
		// Normalising is idempotent: the conflist parses to the same network.
		again, err := ParseNetwork(n.Bytes, "")
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, n.Bytes)
		}
		if again.Name != n.Name || again.CNIVersion != n.CNIVersion || !reflect.DeepEqual(again.Types, n.Types) ||
			!reflect.DeepEqual(again.Capabilities, n.Capabilities) {
			t.Fatalf("re-parse changed the network: %+v then %+v", n, again)
		}
	})
}

// FuzzDRAAnnotations: the NAD annotations of DRA networks either parse into
// what re-parses the same, or fail naming the annotation; device keys never
// set a key that chooses the plugin.
func FuzzDRAAnnotations(f *testing.F) {
	for _, seed := range []string{"nics", "nics/vf", "nics/vf/fast", "", "/", "a//b", `{"device":"dra.example.com/ifName"}`, `{"type":"x"}`, `{"":"a"}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		ref, err := ParseClaimRef(value)
		if err != nil {
			if !strings.Contains(err.Error(), AnnotResourceClaim) {
				t.Fatalf("error %q does not name %s", err, AnnotResourceClaim)
			}
		} else if again, err := ParseClaimRef(ref.String()); err != nil || again != ref {
			t.Fatalf("%q parsed as %+v, which re-parses as %+v, %v", value, ref, again, err)
		}
		keys, err := ParseDeviceKeys(value)
		if err != nil {
			if !strings.Contains(err.Error(), AnnotDeviceKeys) {
				t.Fatalf("error %q does not name %s", err, AnnotDeviceKeys)
			}
			return
		}
		for k, attr := range keys {
			if reservedPluginKeys[k] || k == "" {
				t.Fatalf("%q maps reserved key %q", value, k)
			}
			if checkAttributeName(attr) != nil {
				t.Fatalf("%q maps %q to an invalid attribute %q", value, k, attr)
			}
		}
	})
}
