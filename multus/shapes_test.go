package multus

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// entry builds a record entry with the field names Multus writes. conf is the
// delegate config; Bytes is base64 (Go's encoding of []byte), as on a node.
func entry(name, conf string, extra map[string]any) map[string]any {
	var c map[string]any
	json.Unmarshal([]byte(conf), &c)
	e := map[string]any{
		"Conf": map[string]any{"ipam": map[string]any{}}, "ConfList": map[string]any{},
		"CNINetworkConfigList": map[string]any{"Name": "", "CNIVersion": "", "Plugins": nil, "Bytes": nil},
		"Name":                 name, "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
		"Bytes": []byte(conf),
	}
	if ps, isList := c["plugins"].([]any); isList {
		typed := []any{}
		for _, p := range ps {
			typed = append(typed, typedCopy(p.(map[string]any)))
		}
		e["ConfList"] = map[string]any{"cniVersion": c["cniVersion"], "name": c["name"], "plugins": typed}
	} else {
		e["Conf"] = typedCopy(c)
	}
	for k, v := range extra {
		if v == nil {
			delete(e, k)
		} else {
			e[k] = v
		}
	}
	return e
}

// typedCopy is what Multus's typed copy keeps of a plugin config: only the
// fields cni's types.NetConf knows.
func typedCopy(p map[string]any) map[string]any {
	out := map[string]any{"ipam": map[string]any{}}
	for _, k := range []string{"cniVersion", "name", "type", "capabilities", "dns"} {
		if v, ok := p[k]; ok {
			out[k] = v
		}
	}
	if ipam, ok := p["ipam"].(map[string]any); ok && ipam["type"] != nil {
		out["ipam"] = map[string]any{"type": ipam["type"]}
	}
	return out
}

func writeRecord(t *testing.T, dir, id string, entries ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, id)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeCache writes a libcni cniCacheV1 entry as Multus's libcni does.
func writeCache(t *testing.T, dir, id, network, ifName, conf string, args [][2]string, caps map[string]any) {
	t.Helper()
	e := map[string]any{
		"kind": "cniCacheV1", "containerId": id, "config": []byte(conf), "ifName": ifName,
		"networkName": network, "netns": "/var/run/netns/t", "cniArgs": args, "result": map[string]any{"cniVersion": "1.0.0"},
	}
	if caps != nil {
		e["capabilityArgs"] = caps
	}
	b, _ := json.Marshal(e)
	os.MkdirAll(filepath.Join(dir, "results"), 0o700)
	if err := os.WriteFile(filepath.Join(dir, "results", network+"-"+id+"-"+ifName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

const (
	flannelConf = `{"cniVersion":"0.4.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`
	macvlanConf = `{"cniVersion":"0.3.1","name":"mv","type":"macvlan","master":"eth1","ipam":{"type":"static"}}`
	sriovList   = `{"cniVersion":"1.0.0","name":"sriov","plugins":[{"type":"sriov","vlan":5,"ipam":{"type":"whereabouts","range":"10.5.0.0/24"}}]}`
)

// Shapes the fixtures lack, each with no cache: what the record alone gives.
func TestLoadRecordShapes(t *testing.T) {
	dir := t.TempDir()
	id := "s1"
	writeRecord(t, dir, id,
		// clusterNetwork: a single conf file (0.4.0), kept whole by Multus.
		entry("cbr0", flannelConf, nil),
		// a NAD whose config is a single conf, with a requested interface.
		entry("ns1/mv", macvlanConf, map[string]any{"ifnameRequest": "mv0", "deviceID": "0000:03:00.1"}),
		// a NAD conflist, Bytes written as JSON text rather than base64.
		entry("ns1/sriov", sriovList, map[string]any{"Bytes": sriovList, "default-route": []string{"10.5.0.1"}}),
	)
	rec, err := LoadWith(dir, id, Options{IfName: "eth9"})
	if err != nil {
		t.Fatal(err)
	}
	checkAtts(t, rec, []wantAtt{
		{"cbr0", "", "eth9", true, FromRecord},
		{"mv", "ns1/mv", "mv0", false, FromRecord},
		{"sriov", "ns1/sriov", "net2", false, FromRecord},
	})
	top, ps := plugins(t, rec.Attachments[0].Config)
	if top["cniVersion"] != "0.4.0" || len(ps) != 1 || jsonOf(ps[0]["delegate"]) != `{"hairpinMode":true,"isDefaultGateway":true}` {
		t.Errorf("single conf clusterNetwork = %s", rec.Attachments[0].Config)
	}
	_, ps = plugins(t, rec.Attachments[1].Config)
	if ps[0]["master"] != "eth1" || jsonOf(rec.Attachments[1].RuntimeConfig) != `{"deviceID":"0000:03:00.1"}` {
		t.Errorf("NAD single conf = %s, runtime config %v", rec.Attachments[1].Config, rec.Attachments[1].RuntimeConfig)
	}
	_, ps = plugins(t, rec.Attachments[2].Config)
	if ps[0]["vlan"] != float64(5) || !reflect.DeepEqual(rec.Attachments[2].DefaultRoute, []string{"10.5.0.1"}) {
		t.Errorf("NAD conflist = %s, default route %v", rec.Attachments[2].Config, rec.Attachments[2].DefaultRoute)
	}
	for i, o := range rec.Origins {
		if o.Lossy {
			t.Errorf("origin %d flagged lossy: %+v", i, o)
		}
	}
	if len(rec.Unexplained) != 0 || len(rec.Warnings) != 0 {
		t.Errorf("unexplained %v, warnings %v", rec.Unexplained, rec.Warnings)
	}
}

// Early Multus v3: no "Name", no CNINetworkConfigList, "ipRequest" a string.
func TestLoadV3Record(t *testing.T) {
	dir := t.TempDir()
	id := "v3"
	writeRecord(t, dir, id,
		entry("", flannelConf, map[string]any{"Name": nil, "CNINetworkConfigList": nil}),
		entry("", macvlanConf, map[string]any{"Name": nil, "CNINetworkConfigList": nil, "ipRequest": "10.1.1.5/24", "macRequest": "02:00:00:00:00:01"}),
	)
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	checkAtts(t, rec, []wantAtt{{"cbr0", "", "eth0", true, FromRecord}, {"mv", "", "net1", false, FromRecord}})
	a := rec.Attachments[1]
	if want := [][2]string{{"MAC", "02:00:00:00:00:01"}, {"IP", "10.1.1.5/24"}}; !reflect.DeepEqual(a.CNIArgs, want) {
		t.Errorf("args = %v, want %v", a.CNIArgs, want)
	}
	if got := jsonOf(a.RuntimeConfig); got != `{"ips":["10.1.1.5/24"],"mac":"02:00:00:00:00:01"}` {
		t.Errorf("runtime config = %s", got)
	}
}

// A conflist with no cniVersion: Multus filled in its own at DEL; so does Load
// when told, and without it the entry is reported.
func TestLoadMissingCNIVersion(t *testing.T) {
	dir := t.TempDir()
	id := "nover"
	list := `{"name":"nover","plugins":[{"type":"bridge","bridge":"b0"}]}`
	writeRecord(t, dir, id, entry("nover", list, nil))
	rec, err := LoadWith(dir, id, Options{CNIVersion: "0.4.0"})
	if err != nil {
		t.Fatal(err)
	}
	if top, ps := plugins(t, rec.Attachments[0].Config); top["cniVersion"] != "0.4.0" || ps[0]["bridge"] != "b0" {
		t.Errorf("config = %s", rec.Attachments[0].Config)
	}
	rec, err = Load(dir, id)
	if err != nil || len(rec.Attachments) != 0 || len(rec.Unexplained) != 1 || !strings.Contains(rec.Unexplained[0].Reason, "cniVersion") {
		t.Fatalf("without a cniVersion to fill in: %+v, %v", rec, err)
	}
}

// The same NAD twice (net1, net2): each attachment gets its own cache entry.
// A cache entry no record entry claims is deleted too, last in attach order.
func TestLoadMatchesCacheByNetworkAndInterface(t *testing.T) {
	dir := t.TempDir()
	id := "dup"
	writeRecord(t, dir, id,
		entry("cbr0", flannelConf, nil),
		entry("ns1/mv", macvlanConf, map[string]any{"ipRequest": []string{"10.1.1.1/24"}}),
		entry("ns1/mv", macvlanConf, map[string]any{"ipRequest": []string{"10.1.1.2/24"}}),
	)
	rt := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "p"}}
	writeCache(t, dir, id, "cbr0", "eth0", flannelConf, rt, nil)
	writeCache(t, dir, id, "mv", "net2", macvlanConf, append(rt, [2]string{"IP", "10.1.1.2/24"}), map[string]any{"ips": []string{"10.1.1.2/24"}})
	writeCache(t, dir, id, "mv", "net1", macvlanConf, append(rt, [2]string{"IP", "10.1.1.1/24"}), map[string]any{"ips": []string{"10.1.1.1/24"}})
	writeCache(t, dir, id, "stray", "net7", `{"cniVersion":"1.0.0","name":"stray","type":"ptp"}`, rt, nil)
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	checkAtts(t, rec, []wantAtt{
		{"cbr0", "", "eth0", true, FromCache},
		{"mv", "ns1/mv", "net1", false, FromCache},
		{"mv", "ns1/mv", "net2", false, FromCache},
		{"stray", "", "net7", false, FromCache},
	})
	for i, ip := range map[int]string{1: "10.1.1.1/24", 2: "10.1.1.2/24"} {
		if a := rec.Attachments[i]; !reflect.DeepEqual(a.CNIArgs, [][2]string{{"IP", ip}}) || jsonOf(a.RuntimeConfig) != `{"ips":["`+ip+`"]}` {
			t.Errorf("attachment %d: args %v, runtime config %v; want %s", i, a.CNIArgs, a.RuntimeConfig, ip)
		}
	}
	if !reflect.DeepEqual(rec.RuntimeArgs, [][2]string{{"K8S_POD_NAME", "p"}}) {
		t.Errorf("runtime args = %v", rec.RuntimeArgs)
	}
	if len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "stray") {
		t.Errorf("warnings = %v", rec.Warnings)
	}
}

// An entry neither the record nor the cache can give is reported, and the
// others still load.
func TestLoadReportsUnexplained(t *testing.T) {
	dir := t.TempDir()
	id := "unx"
	path := writeRecord(t, dir, id,
		entry("cbr0", flannelConf, nil),
		entry("ns1/mv", macvlanConf, map[string]any{"Bytes": "!!not base64 nor json"}),
		entry("ns1/bad", `{"cniVersion":"1.0.0","name":"bad","plugins":[]}`, nil),
		entry("ns1/odd", macvlanConf, map[string]any{"ifnameRequest": 5}),
	)
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	checkAtts(t, rec, []wantAtt{{"cbr0", "", "eth0", true, FromRecord}})
	if len(rec.Unexplained) != 3 {
		t.Fatalf("unexplained = %+v", rec.Unexplained)
	}
	u := rec.Unexplained[0]
	if u.Index != 1 || u.Network != "ns1/mv" || u.IfName != "net1" || u.File != path || !strings.Contains(u.Reason, "base64") {
		t.Errorf("unexplained[0] = %+v", u)
	}
	if u := rec.Unexplained[1]; u.Index != 2 || u.Network != "ns1/bad" || !strings.Contains(u.Reason, "empty") {
		t.Errorf("unexplained[1] = %+v", u)
	}
	if u := rec.Unexplained[2]; u.Index != 3 || u.Network != "ns1/odd" || !strings.Contains(u.Reason, "not a Multus delegate") {
		t.Errorf("unexplained[2] = %+v", u)
	}
	msg := rec.UnexplainedError().Error()
	for _, s := range []string{id, "ns1/mv", "ns1/bad", "ns1/odd", path, "net1"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not name %q", msg, s)
		}
	}
}

// CNINetworkConfigList rebuilt: the plugins a subdirectory chain appended to
// Plugins, and the deviceID and cni-args Multus added to Bytes afterwards.
func TestLoadRebuildsConfigList(t *testing.T) {
	dir := t.TempDir()
	id := "cl"
	orig := `{"cniVersion":"1.0.0","name":"chain","disableCheck":true,"plugins":[{"type":"sriov","vlan":7}]}`
	lossy := `{"cniVersion":"1.0.0","name":"chain","plugins":[{"type":"sriov","ipam":{},"deviceID":"0000:01:00.2","args":{"cni":{"foo":"bar"}}},{"type":"tuning","ipam":{}}]}`
	cl := map[string]any{"Name": "chain", "CNIVersion": "1.0.0", "Bytes": []byte(orig), "Plugins": []map[string]any{
		{"Network": map[string]any{"type": "sriov"}, "Bytes": []byte(`{"type":"sriov","vlan":7}`)},
		{"Network": map[string]any{"type": "tuning"}, "Bytes": []byte(`{"type":"tuning","mtu":9000}`)},
	}}
	writeRecord(t, dir, id, entry("chain", lossy, map[string]any{"CNINetworkConfigList": cl}))
	rec, err := Load(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Origins[0].Source != FromConfigList {
		t.Fatalf("origin = %+v", rec.Origins[0])
	}
	top, ps := plugins(t, rec.Attachments[0].Config)
	want := `[{"args":{"cni":{"foo":"bar"}},"deviceID":"0000:01:00.2","type":"sriov","vlan":7},{"mtu":9000,"type":"tuning"}]`
	if top["disableCheck"] != true || jsonOf(ps) != want {
		t.Errorf("rebuilt = %s\nwant plugins %s", rec.Attachments[0].Config, want)
	}
}

func TestLoadUnknownFormat(t *testing.T) {
	for name, content := range map[string]string{
		"v2 list of plugin configs": `[{"type":"flannel","name":"f","masterplugin":true}]`,
		"object":                    `{"version":1,"record":{}}`,
		"list of strings":           `["a"]`,
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "u1"), []byte(content), 0o600)
		rec, err := Load(dir, "u1")
		if !errors.Is(err, ErrUnknownFormat) || rec != nil {
			t.Errorf("%s: got %v, %v; want ErrUnknownFormat", name, rec, err)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "u2"), nil, 0o600)
	if _, err := Load(dir, "u2"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("empty record: %v, want ErrCorrupt", err)
	}
}

// Every read is bounded, and a FIFO or a symlink in Multus's dir is refused
// rather than read (a FIFO would block DEL for good).
func TestLoadBoundsReads(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, MaxFileBytes+1)
	for i := range big {
		big[i] = ' '
	}
	os.WriteFile(filepath.Join(dir, "big"), big, 0o600)
	if _, err := Load(dir, "big"); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized record: %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(dir, "fifo"); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO record was accepted")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}
	elsewhere := t.TempDir()
	target := writeRecord(t, elsewhere, "valid", entry("cbr0", flannelConf, nil))
	os.Symlink(target, filepath.Join(dir, "link"))
	if _, err := Load(dir, "link"); err == nil {
		t.Error("a symlinked record was followed")
	}
}

// A torn cache file with no record: nothing to DEL, but the caller hears of it.
func TestLoadTornCacheOnly(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "results"), 0o700)
	os.WriteFile(filepath.Join(dir, "results", "net-tc-eth0"), []byte(`{"kind":"cniCa`), 0o600)
	rec, err := Load(dir, "tc")
	if err != nil || rec == nil || len(rec.Attachments) != 0 || len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "net-tc-eth0") {
		t.Fatalf("got %+v, %v; want a Record with one warning naming the file", rec, err)
	}
}
