package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/plugins/test/noop/debug"
)

// Scenario 1: the comma form. "a, b@custom, other-ns/c" gives eth0 (the
// cluster network), net1, custom and net3: an explicit name still uses up its
// number.
func TestCommaForm(t *testing.T) {
	e := newEnv(t)
	other := e.namespace("e2e-other-")
	sa, sb, sc := nextSubnet(), nextSubnet(), nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa)) // no "name": the NAD's name is injected
	e.nad(e.ns, "b", e.macvlanConf("net-b", sb))
	e.nad(other, "c", e.macvlanConf("", sc))
	pod := e.pod(e.ns, map[string]string{annotNetworks: " a, b@custom ,\t" + other + "/c "})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)

	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/a", ifname: "net1", subnet: sa},
		{name: e.ns + "/b", ifname: "custom", subnet: sb},
		{name: other + "/c", ifname: "net3", subnet: sc},
	})
	wantRoutes := []string{"default via " + e.cluster.IP(1) + " dev eth0"}
	if got := defaultRoutes(routes(t, box.netns)); !slices.Equal(got, wantRoutes) {
		t.Errorf("default routes = %v, want %v", got, wantRoutes)
	}
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 4 {
		t.Errorf("host-local leases after ADD = %v, want 4", got)
	}
	if err := e.rt.Check(e.ctx(), conf, box.Pod); err != nil {
		t.Errorf("CHECK after ADD: %v", err)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	e.mustDel(conf, box) // a second DEL succeeds too
}

// Scenario 2: the JSON form with interface, ips (static IPAM), mac, cni-args
// and default-route. The NAD chains macvlan (static IPAM), tuning and noop;
// noop records exactly what its delegate call received.
func TestJSONForm(t *testing.T) {
	e := newEnv(t)
	s := nextSubnet()
	dir := t.TempDir()
	dbg, cmdLog := filepath.Join(dir, "noop-debug.json"), filepath.Join(dir, "noop-cmdlog.json")
	if err := (&debug.Debug{ReportResult: "PASSTHROUGH"}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cmdLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The NAD sets args.cni mtu and promisc for tuning; the annotation's
	// cni-args must win for mtu and keep promisc.
	e.nad(e.ns, "static", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"static-net","plugins":[
		{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"static"},"capabilities":{"ips":true}},
		{"type":"tuning","dataDir":%q,"capabilities":{"mac":true},"args":{"cni":{"mtu":1300,"promisc":true}}},
		{"type":"noop","debugFile":%q,"commandLog":%q}]}`, e.parent, e.tuningDir, dbg, cmdLog))
	const mac = "02:e2:e0:00:00:07"
	annotation := fmt.Sprintf(`[{"name":"static","interface":"data0","ips":[%q],"mac":%q,
		"cni-args":{"mtu":1400,"note":"from-annotation"},"default-route":[%q]}]`, s.CIDR(7), mac, s.IP(1))
	pod := e.pod(e.ns, map[string]string{annotNetworks: annotation})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)

	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{
		// The default route moved away from eth0, so it has no gateway now.
		{name: clusterName, ifname: "eth0", subnet: e.cluster, dns: []string{e.cluster.IP(53)}},
		{name: e.ns + "/static", ifname: "data0", ip: s.CIDR(7), mac: mac, gateway: []string{s.IP(1)}, defaultRoute: []string{s.IP(1)}},
	})

	// tuning honoured args.cni: mtu from the annotation, promisc from the NAD.
	data0 := links(t, box.netns)["data0"]
	if data0.mtu != 1400 {
		t.Errorf("data0 MTU = %d, want 1400 (cni-args mtu, which wins over the NAD's 1300)", data0.mtu)
	}
	if !data0.promisc {
		t.Errorf("data0 is not promiscuous; the NAD's args.cni promisc=true was lost in the merge")
	}

	// The pod's only default route is via data0's requested gateway.
	wantRoutes := []string{"default via " + s.IP(1) + " dev data0"}
	if got := defaultRoutes(routes(t, box.netns)); !slices.Equal(got, wantRoutes) {
		t.Errorf("default routes = %v, want %v", got, wantRoutes)
	}

	// What the delegate saw: args.cni merged, CNI_ARGS as containerd's plus
	// IP= and MAC=, the requested interface name.
	entries, err := debug.ReadCommandLog(cmdLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Command != "ADD" {
		t.Fatalf("noop saw %d calls, want one ADD", len(entries))
	}
	got := entries[0].CmdArgs
	if got.IfName != "data0" || got.ContainerID != box.ContainerID || got.Netns != box.NetNS {
		t.Errorf("noop CNI_IFNAME/CONTAINERID/NETNS = %s/%s/%s, want data0/%s/%s", got.IfName, got.ContainerID, got.Netns, box.ContainerID, box.NetNS)
	}
	// IgnoreUnknown=1 first, then the runtime's keys in its order, then the
	// attachment's own (in any order).
	gotArgs := strings.Split(got.Args, ";")
	wantHead := []string{"IgnoreUnknown=1", "K8S_POD_NAMESPACE=" + e.ns, "K8S_POD_NAME=" + pod.Name,
		"K8S_POD_INFRA_CONTAINER_ID=" + box.ContainerID, "K8S_POD_UID=" + string(pod.UID)}
	wantTail := []string{"IP=" + s.CIDR(7), "MAC=" + mac}
	if len(gotArgs) != len(wantHead)+len(wantTail) || !slices.Equal(gotArgs[:len(wantHead)], wantHead) ||
		!slices.Equal(sorted(gotArgs[len(wantHead):]), wantTail) {
		t.Errorf("noop CNI_ARGS = %q\nwant %q followed by %q", got.Args, strings.Join(wantHead, ";"), wantTail)
	}
	var stdin struct {
		Args struct {
			CNI map[string]any `json:"cni"`
		} `json:"args"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(got.StdinData, &stdin); err != nil {
		t.Fatalf("noop stdin: %v\n%s", err, got.StdinData)
	}
	wantCNI := map[string]any{"mtu": 1400.0, "note": "from-annotation"}
	if !reflect.DeepEqual(stdin.Args.CNI, wantCNI) {
		t.Errorf("noop args.cni = %v, want %v (the annotation's cni-args)", stdin.Args.CNI, wantCNI)
	}
	if len(stdin.PrevResult) == 0 {
		t.Errorf("noop got no prevResult: %s", got.StdinData)
	}
	if err := e.rt.Check(e.ctx(), conf, box.Pod); err != nil {
		t.Errorf("CHECK after ADD: %v", err)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	if entries, err := debug.ReadCommandLog(cmdLog); err != nil || len(entries) < 2 || entries[len(entries)-1].Command != "DEL" {
		t.Errorf("noop log after DEL: %d entries (%v), want the DEL last", len(entries), err)
	}
}

// Scenario 3: the same NAD twice gives two attachments and two status
// entries.
func TestSameNetworkTwice(t *testing.T) {
	e := newEnv(t)
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	pod := e.pod(e.ns, map[string]string{annotNetworks: "a,a"})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)

	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/a", ifname: "net1", subnet: sa},
		{name: e.ns + "/a", ifname: "net2", subnet: sa},
	})
	l := links(t, box.netns)
	if l["net1"].addrString() == l["net2"].addrString() || l["net1"].mac == l["net2"].mac {
		t.Errorf("net1 (%s %s) and net2 (%s %s) share an address or MAC", l["net1"].addrString(), l["net1"].mac, l["net2"].addrString(), l["net2"].mac)
	}
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 3 {
		t.Errorf("host-local leases after ADD = %v, want 3", got)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// Scenario 7: a NAD with an empty spec.config is found in confDir by name (a
// .conflist wins over a .conf of the same name), and one with no such file
// fails with code 7 naming it.
func TestEmptyConfigFromConfDir(t *testing.T) {
	e := newEnv(t)
	sd, decoy := nextSubnet(), nextSubnet()
	e.nad(e.ns, "fromdir", "")
	e.nad(e.ns, "nofile", "")
	e.writeFile(filepath.Join(e.confDir, "10-fromdir.conf"), e.macvlanConf("fromdir", decoy))
	e.writeFile(filepath.Join(e.confDir, "20-fromdir.conflist"), fmt.Sprintf(`{"cniVersion":"1.0.0","name":"fromdir","plugins":[%s]}`, e.macvlanConf("", sd)))
	conf := e.manifoldConf(nil)

	t.Run("found", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "fromdir"})
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, []want{
			e.clusterWant(),
			{name: e.ns + "/fromdir", ifname: "net1", subnet: sd},
		})
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	})

	t.Run("not found", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "fromdir, nofile"})
		box := e.sandboxFor(pod)
		_, err := e.add(conf, box)
		wantCode(t, err, 7, e.ns+"/nofile", e.ns+"/"+pod.Name)
		e.checkRefused(box, e.ns+"/nofile")
	})
}
