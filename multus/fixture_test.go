package multus

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	staticID = "0f3c9b2a7d1e4c5b8a6f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b"
	nadsID   = "7a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
)

// copyFixture copies a fixture's cniDir into dir, with the fixture's container
// ID replaced by id in file names and contents, so that nothing depends on the
// IDs the fixture was made with.
func copyFixture(t *testing.T, name, oldID, id, dir string) {
	t.Helper()
	src := filepath.Join("testdata", "multus-v4.3.0", name, "cniDir")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, strings.ReplaceAll(rel, oldID, id))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, []byte(strings.ReplaceAll(string(b), oldID, id)), 0o600)
	})
	if err != nil {
		t.Fatalf("copy fixture %s: %v", name, err)
	}
}

// plugins decodes an attachment's conflist into its top and its plugins.
func plugins(t *testing.T, raw []byte) (map[string]any, []map[string]any) {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatalf("config is not JSON: %v: %s", err, raw)
	}
	var ps []map[string]any
	b, _ := json.Marshal(top["plugins"])
	if err := json.Unmarshal(b, &ps); err != nil || len(ps) == 0 {
		t.Fatalf("config is not a conflist: %s", raw)
	}
	return top, ps
}

// jsonOf is v as JSON, to compare values whose Go types differ (decoded []any
// against built []string).
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

type wantAtt struct {
	network, nad, ifName string
	isDefault            bool
	source               Source
}

func checkAtts(t *testing.T, rec *Record, want []wantAtt) {
	t.Helper()
	if len(rec.Attachments) != len(want) || len(rec.Origins) != len(want) {
		t.Fatalf("got %d attachments (%d origins), want %d: %+v", len(rec.Attachments), len(rec.Origins), len(want), rec.Attachments)
	}
	for i, w := range want {
		a := rec.Attachments[i]
		got := wantAtt{a.Network, a.NAD, a.IfName, a.IsDefault, rec.Origins[i].Source}
		if got != w {
			t.Errorf("attachment %d = %+v, want %+v", i, got, w)
		}
	}
}

func TestLoadStaticDelegatesFixture(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee01"
	copyFixture(t, "static-delegates", staticID, id, dir)
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	checkAtts(t, rec, []wantAtt{
		{"cluster", "", "eth0", true, FromCache},
		{"storage", "", "net1", false, FromCache},
		{"legacy", "", "net2", false, FromCache},
	})
	_, ps := plugins(t, rec.Attachments[0].Config)
	if len(ps) != 2 || ps[0]["bridge"] != "fixbr0" || ps[1]["type"] != "portmap" {
		t.Errorf("cluster config = %s", rec.Attachments[0].Config)
	}
	if !rec.Attachments[0].Capabilities["portMappings"] {
		t.Errorf("cluster capabilities = %v", rec.Attachments[0].Capabilities)
	}
	top, ps := plugins(t, rec.Attachments[2].Config)
	if top["cniVersion"] != "0.3.1" || top["name"] != "legacy" || ps[0]["type"] != "ptp" ||
		jsonOf(ps[0]["ipam"]) != `{"subnet":"10.90.0.0/24","type":"host-local"}` {
		t.Errorf("legacy 0.3.1 conf not wrapped into a conflist faithfully: %s", rec.Attachments[2].Config)
	}
	_, ps = plugins(t, rec.Attachments[1].Config)
	if ps[0]["master"] != "fixpar0" {
		t.Errorf("storage config = %s", rec.Attachments[1].Config)
	}
	wantArgs := [][2]string{{"K8S_POD_NAMESPACE", ""}, {"K8S_POD_NAME", ""}, {"K8S_POD_INFRA_CONTAINER_ID", ""}, {"K8S_POD_UID", ""}}
	if !reflect.DeepEqual(rec.RuntimeArgs, wantArgs) {
		t.Errorf("runtime args = %v, want %v", rec.RuntimeArgs, wantArgs)
	}
	if rec.NetNS != "/var/run/netns/fixture-ns-1" || !rec.HasRecord {
		t.Errorf("netns %q, has record %v", rec.NetNS, rec.HasRecord)
	}
	for i, a := range rec.Attachments {
		if a.CNIArgs != nil || a.RuntimeConfig != nil {
			t.Errorf("attachment %d has args %v, runtime config %v; it asked for none", i, a.CNIArgs, a.RuntimeConfig)
		}
	}
	if len(rec.Unexplained) != 0 || len(rec.Warnings) != 0 || rec.UnexplainedError() != nil {
		t.Errorf("unexplained %v, warnings %v", rec.Unexplained, rec.Warnings)
	}
}

func checkNADsFixture(t *testing.T, rec *Record, first Source) {
	t.Helper()
	checkAtts(t, rec, []wantAtt{
		{"k8s-pod-network", "", "eth0", true, first},
		{"macvlan-conf", "default/macvlan-conf", "net1", false, FromCache},
		{"bridge-list", "default/bridge-list", "data0", false, FromCache},
	})
	// The record's own copy lost these; the config chosen must have them.
	_, ps := plugins(t, rec.Attachments[0].Config)
	if len(ps) != 2 || ps[0]["bridge"] != "fixbr1" || ps[0]["isGateway"] != true ||
		jsonOf(ps[0]["ipam"]) != `{"ranges":[[{"subnet":"10.91.0.0/24"}]],"type":"host-local"}` ||
		jsonOf(ps[1]["sysctl"]) != `{"net.ipv4.conf.eth0.rp_filter":"0"}` {
		t.Errorf("clusterNetwork config is not the full one: %s", rec.Attachments[0].Config)
	}
	top, ps := plugins(t, rec.Attachments[1].Config)
	if top["cniVersion"] != "0.3.1" || ps[0]["master"] != "fixpar0" {
		t.Errorf("macvlan-conf config = %s", rec.Attachments[1].Config)
	}
	bl := rec.Attachments[2]
	_, ps = plugins(t, bl.Config)
	if ps[0]["bridge"] != "fixbr2" || !bl.Capabilities["ips"] || !bl.Capabilities["mac"] {
		t.Errorf("bridge-list config = %s, capabilities %v", bl.Config, bl.Capabilities)
	}
	if want := [][2]string{{"MAC", "02:11:22:33:44:55"}, {"IP", "10.93.0.7/24"}}; !reflect.DeepEqual(bl.CNIArgs, want) {
		t.Errorf("bridge-list args = %v, want %v", bl.CNIArgs, want)
	}
	if got := jsonOf(bl.RuntimeConfig); got != `{"ips":["10.93.0.7/24"],"mac":"02:11:22:33:44:55"}` {
		t.Errorf("bridge-list runtime config = %s", got)
	}
	for i := 0; i < 2; i++ {
		if rec.Attachments[i].CNIArgs != nil || rec.Attachments[i].RuntimeConfig != nil {
			t.Errorf("attachment %d: args %v, runtime config %v", i, rec.Attachments[i].CNIArgs, rec.Attachments[i].RuntimeConfig)
		}
	}
}

func TestLoadKubernetesNADsFixture(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee02"
	copyFixture(t, "kubernetes-nads", nadsID, id, dir)
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	checkNADsFixture(t, rec, FromCache)
	wantArgs := [][2]string{
		{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "fixture-pod"},
		{"K8S_POD_INFRA_CONTAINER_ID", id}, {"K8S_POD_UID", "bdc06540-f1ff-4778-9fb7-f0e9bbfb8742"},
	}
	if !reflect.DeepEqual(rec.RuntimeArgs, wantArgs) {
		t.Errorf("runtime args = %v, want %v (one per key, no IgnoreUnknown, IP or MAC)", rec.RuntimeArgs, wantArgs)
	}
	if rec.NetNS != "/var/run/netns/fixture-ns-2" || len(rec.Unexplained) != 0 || len(rec.Warnings) != 0 {
		t.Errorf("netns %q, unexplained %v, warnings %v", rec.NetNS, rec.Unexplained, rec.Warnings)
	}
}

// Without the cache, the clusterNetwork conflist comes from CNINetworkConfigList
// and the annotation's ips and mac from the record's requests.
func TestLoadKubernetesNADsFixtureWithoutCache(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee03"
	copyFixture(t, "kubernetes-nads", nadsID, id, dir)
	if err := os.RemoveAll(filepath.Join(dir, "results")); err != nil {
		t.Fatal(err)
	}
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Origins[0].Source != FromConfigList || rec.Origins[1].Source != FromRecord || rec.Origins[2].Source != FromRecord {
		t.Errorf("origins = %+v", rec.Origins)
	}
	for i := range rec.Origins {
		rec.Origins[i].Source = FromCache // the rest must be as with the cache
	}
	checkNADsFixture(t, rec, FromCache)
	if rec.RuntimeArgs != nil || rec.NetNS != "" {
		t.Errorf("runtime args %v, netns %q: nothing tells them without a cache", rec.RuntimeArgs, rec.NetNS)
	}
}

// With neither the cache nor CNINetworkConfigList, the lossy Bytes is all there
// is: it is used, and flagged.
func TestLoadLossyBytesFlagged(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee04"
	copyFixture(t, "kubernetes-nads", nadsID, id, dir)
	os.RemoveAll(filepath.Join(dir, "results"))
	path := filepath.Join(dir, id)
	var entries []map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &entries); err != nil {
		t.Fatal(err)
	}
	entries[0]["CNINetworkConfigList"] = map[string]any{"Name": "", "Plugins": nil, "Bytes": nil}
	b, _ = json.Marshal(entries)
	os.WriteFile(path, b, 0o600)

	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	o := rec.Origins
	if o[0].Source != FromRecord || !o[0].Lossy || o[1].Lossy || o[2].Lossy {
		t.Fatalf("origins = %+v: only the re-encoded clusterNetwork is lossy", o)
	}
	if len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "k8s-pod-network") {
		t.Errorf("warnings = %v", rec.Warnings)
	}
}

func TestLoadCacheOnly(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee05"
	copyFixture(t, "kubernetes-nads", nadsID, id, dir)
	os.Remove(filepath.Join(dir, id))
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.HasRecord {
		t.Error("HasRecord with no record")
	}
	checkAtts(t, rec, []wantAtt{
		{"k8s-pod-network", "", "eth0", true, FromCache},
		{"macvlan-conf", "", "net1", false, FromCache},
		{"bridge-list", "", "data0", false, FromCache},
	})
}

func TestLoadTornRecord(t *testing.T) {
	dir := t.TempDir()
	id := "c0ffee06"
	copyFixture(t, "kubernetes-nads", nadsID, id, dir)
	path := filepath.Join(dir, id)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)/2], 0o600)

	rec, err := Load(dir, id)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrCorrupt naming %s", err, path)
	}
	if rec == nil || len(rec.Attachments) != 3 || rec.Attachments[0].IfName != "eth0" {
		t.Fatalf("with a torn record the cache must still give its attachments, got %+v", rec)
	}
	os.RemoveAll(filepath.Join(dir, "results"))
	rec, err = Load(dir, id)
	if !errors.Is(err, ErrCorrupt) || rec != nil {
		t.Fatalf("rec %v, err %v; want nil and ErrCorrupt", rec, err)
	}
}

func TestLoadNothing(t *testing.T) {
	rec, err := Load(t.TempDir(), "c0ffee07")
	if rec != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil", rec, err)
	}
	rec, err = Load(filepath.Join(t.TempDir(), "absent"), "c0ffee07")
	if rec != nil || err != nil {
		t.Fatalf("missing dir: got %v, %v; want nil, nil", rec, err)
	}
}

func TestLoadRefusesBadContainerID(t *testing.T) {
	for _, id := range []string{"", "../etc", "a/b", "results", ".hidden"} {
		if _, err := Load(t.TempDir(), id); err == nil {
			t.Errorf("Load(%q) succeeded", id)
		}
		if err := Remove(t.TempDir(), id); err == nil {
			t.Errorf("Remove(%q) succeeded", id)
		}
	}
}
