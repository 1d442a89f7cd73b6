package multus

import (
	"strings"
	"testing"
)

// TestLoadRefusesUntrustedEntries: an entry whose values fail manifold's
// checks is not an attachment but Unexplained, with the reason, whether it
// comes from the record or from a cache entry; the other entries are still
// attachments.
func TestLoadRefusesUntrustedEntries(t *testing.T) {
	const good = `{"cniVersion":"1.0.0","name":"good","type":"bridge"}`
	for _, tc := range []struct {
		name   string
		write  func(t *testing.T, dir, id string)
		reason string
	}{
		{"a path in ifnameRequest", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil), entry("ns/evil", `{"cniVersion":"1.0.0","name":"evil","type":"bridge"}`, map[string]any{"ifnameRequest": "x/../passwd"}))
		}, "contains '/'"},
		{"a control character in ifnameRequest", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil), entry("ns/evil", `{"cniVersion":"1.0.0","name":"evil","type":"bridge"}`, map[string]any{"ifnameRequest": "a\nb"}))
		}, "interface name"},
		{"a path in a cache entry's ifName", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil))
			writeCache(t, dir, id, "evil", "..", `{"cniVersion":"1.0.0","name":"evil","type":"bridge"}`, nil, nil)
		}, "is not allowed"},
		{"a NAD that runs a meta-plugin", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil), entry("ns/evil", `{"cniVersion":"1.0.0","name":"evil","type":"multus-shim"}`, nil))
		}, "meta-plugin"},
		{"a NAD whose IPAM is a meta-plugin", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil), entry("ns/evil", `{"cniVersion":"1.0.0","name":"evil","type":"bridge","ipam":{"type":"manifold"}}`, nil))
		}, "meta-plugin"},
		{"a NAD outside allowedPluginTypes", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil), entry("ns/evil", `{"cniVersion":"1.0.0","name":"evil","type":"vlan"}`, nil))
		}, "allowedPluginTypes"},
		{"a cache entry of unknown origin outside allowedPluginTypes", func(t *testing.T, dir, id string) {
			writeRecord(t, dir, id, entry("good", good, nil))
			writeCache(t, dir, id, "evil", "net5", `{"cniVersion":"1.0.0","name":"evil","type":"vlan"}`, nil, nil)
		}, "allowedPluginTypes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := t.TempDir(), "c1"
			tc.write(t, dir, id)
			rec, err := LoadWith(dir, id, Options{AllowedPluginTypes: []string{"bridge", "host-local"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Attachments) != 1 || rec.Attachments[0].Network != "good" {
				t.Errorf("attachments %+v, want only the good one", rec.Attachments)
			}
			if len(rec.Unexplained) != 1 || !strings.Contains(rec.Unexplained[0].Reason, tc.reason) || !strings.Contains(rec.Unexplained[0].Reason, "not run") {
				t.Errorf("unexplained %+v, want one entry whose reason says %q and that it is not run", rec.Unexplained, tc.reason)
			}
		})
	}
	// The default network is the admin's, not a NAD's: allowedPluginTypes
	// does not apply to it, the meta-plugin refusal does.
	dir := t.TempDir()
	writeRecord(t, dir, "c2", entry("cbr0", `{"cniVersion":"1.0.0","name":"cbr0","type":"flannel"}`, nil))
	rec, err := LoadWith(dir, "c2", Options{AllowedPluginTypes: []string{"bridge"}})
	if err != nil || len(rec.Attachments) != 1 || len(rec.Unexplained) != 0 {
		t.Errorf("default network of a type outside allowedPluginTypes: %+v, %v; want it attached", rec, err)
	}
}
