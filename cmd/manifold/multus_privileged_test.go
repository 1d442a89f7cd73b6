package main_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/scratch"
)

// mEntry is one network as Multus attached it (issue 19): the config it ran,
// and what its record says about it.
type mEntry struct {
	conf string // a conf or a conflist, as Multus handed it to libcni
	name string // the record's "Name": "namespace/name" for a NAD
	// ifName, when set, is an interface name the pod requested
	// (ifnameRequest); else eth0 for the first entry and net<i> after it.
	ifName string
	mac    string
	ips    []string
	// reencoded: the record's Bytes is Multus's re-encoding of its typed
	// ConfList, which drops the plugins' own fields (clusterNetwork or
	// defaultNetworks given as a conflist file or a dir). withConfigList adds
	// CNINetworkConfigList, as v4.3.0 does.
	reencoded, withConfigList bool
	// garbage makes the record's Bytes unreadable and drops the cache entry:
	// an entry that neither source explains.
	garbage bool
}

func (e mEntry) isList() bool {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(e.conf), &m)
	return m["plugins"] != nil
}

// multusAttach does what Multus's ADD does for pod: each entry through libcni
// with dir as its cache dir, with Multus's interface names and CNI_ARGS, and
// then (Multus writes it first; the order does not matter here) its record.
func multusAttach(t *testing.T, n *node, dir string, pod *testenv.Pod, entries []mEntry) {
	t.Helper()
	ctx := context.Background()
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	cni := libcni.NewCNIConfigWithCacheDir([]string{n.rt.BinDir}, dir, exec)
	var record []map[string]any
	for i, e := range entries {
		ifName := e.ifName
		switch {
		case ifName != "":
		case i == 0:
			ifName = "eth0"
		default:
			ifName = fmt.Sprintf("net%d", i)
		}
		args := [][2]string{{"IgnoreUnknown", "true"}}
		args = append(args, pod.Args...)
		args = append(args, [2]string{"IgnoreUnknown", "1"})
		args = append(args, pod.Args...)
		caps := map[string]any{}
		if e.mac != "" {
			args = append(args, [2]string{"MAC", e.mac})
			caps["mac"] = e.mac
		}
		if len(e.ips) > 0 {
			args = append(args, [2]string{"IP", strings.Join(e.ips, ",")})
			caps["ips"] = e.ips
		}
		rt := &libcni.RuntimeConf{ContainerID: pod.ContainerID, NetNS: pod.NetNS, IfName: ifName, Args: args, CapabilityArgs: caps}
		var top map[string]any
		if err := json.Unmarshal([]byte(e.conf), &top); err != nil {
			t.Fatal(err)
		}
		if e.isList() {
			list := testenv.Conf(t, []byte(e.conf))
			if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
				t.Fatalf("Multus's ADD of %s: %v", e.name, err)
			}
		} else {
			c, err := libcni.ConfFromBytes([]byte(e.conf))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cni.AddNetwork(ctx, c, rt); err != nil {
				t.Fatalf("Multus's ADD of %s: %v", e.name, err)
			}
		}
		record = append(record, recordEntry(t, e, top))
		if e.garbage {
			if err := os.Remove(filepath.Join(dir, "results", top["name"].(string)+"-"+pod.ContainerID+"-"+ifName)); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := json.Marshal(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pod.ContainerID), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recordEntry is one element of Multus's record (Go's encoding of its
// DelegateNetConf), as the fixtures in ../shared/fixtures/multus-v4.3.0 show.
func recordEntry(t *testing.T, e mEntry, top map[string]any) map[string]any {
	typedPlugin := func(p map[string]any) map[string]any {
		out := map[string]any{"type": p["type"], "ipam": map[string]any{}}
		if ipam, ok := p["ipam"].(map[string]any); ok && ipam["type"] != nil {
			out["ipam"] = map[string]any{"type": ipam["type"]}
		}
		if p["capabilities"] != nil {
			out["capabilities"] = p["capabilities"]
		}
		return out
	}
	rec := map[string]any{"Name": e.name, "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
		"CNINetworkConfigList": map[string]any{"Name": "", "CNIVersion": "", "DisableCheck": false, "DisableGC": false, "LoadOnlyInlinedPlugins": false, "Plugins": nil, "Bytes": nil}}
	bytes := []byte(e.conf)
	if e.isList() {
		var plugins []any
		var raw []string
		for _, p := range top["plugins"].([]any) {
			plugins = append(plugins, typedPlugin(p.(map[string]any)))
			pb, _ := json.Marshal(p)
			raw = append(raw, base64.StdEncoding.EncodeToString(pb))
		}
		typed := map[string]any{"cniVersion": top["cniVersion"], "name": top["name"], "plugins": plugins}
		rec["Conf"] = map[string]any{"cniVersion": top["cniVersion"], "name": top["name"], "ipam": map[string]any{}}
		rec["ConfList"] = typed
		if e.reencoded {
			bytes, _ = json.Marshal(typed)
		}
		if e.withConfigList {
			var ps []any
			for i, p := range plugins {
				ps = append(ps, map[string]any{"Network": p, "Bytes": raw[i]})
			}
			rec["CNINetworkConfigList"] = map[string]any{"Name": top["name"], "CNIVersion": top["cniVersion"], "DisableCheck": false,
				"DisableGC": false, "LoadOnlyInlinedPlugins": false, "Plugins": ps, "Bytes": base64.StdEncoding.EncodeToString([]byte(e.conf))}
		}
	} else {
		c := typedPlugin(top)
		c["cniVersion"], c["name"] = top["cniVersion"], top["name"]
		rec["Conf"] = c
		rec["ConfList"] = map[string]any{}
	}
	if e.garbage {
		bytes = []byte("this is not a config")
	}
	rec["Bytes"] = base64.StdEncoding.EncodeToString(bytes)
	if e.ifName != "" {
		rec["ifnameRequest"] = e.ifName
	}
	if e.mac != "" {
		rec["macRequest"] = e.mac
	}
	if len(e.ips) > 0 {
		rec["ipRequest"] = e.ips
	}
	return rec
}

// multusNode is a test node with a Multus cniDir of its own; sameDir gives
// manifold and Multus the same cniDir (an admin who changed only "type").
func multusNode(t *testing.T, sameDir bool) (*node, string, []byte) {
	n := newNode(t)
	dir := t.TempDir()
	if sameDir {
		dir = n.cniDir
	}
	// manifold's own default network is another bridge: a DEL that fell back
	// to it instead of reading Multus's record would leave the pod attached.
	conf := n.manifoldConf(t, "1.1.0", map[string]any{"multusCNIDir": dir}, conflist("1.0.0", "other-net", `{"type":"bridge","bridge":"mfunused0","ipam":{"type":"host-local","subnet":"10.239.0.0/24","dataDir":"`+t.TempDir()+`"}}`))
	return n, dir, conf
}

func (n *node) bridgeList(subnet string) string {
	return conflist("1.0.0", "k8s-pod-network", plug(n.bridgeConf("1.0.0", subnet)), `{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.rp_filter":"0"}}`)
}

// plug is pluginOf for configs known to be valid.
func plug(conf string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	delete(m, "cniVersion")
	delete(m, "name")
	b, _ := json.Marshal(m)
	return string(b)
}

// multusShapes are the delegate shapes Multus writes (issue 19), each as the
// entries of one pod; i tells pods apart (addresses).
func multusShapes(n *node, parent string) map[string]func(i int) []mEntry {
	mv := func(version, name, subnet string) string {
		return strings.Replace(n.macvlanConf(version, parent, subnet), `"mv-net"`, fmt.Sprintf("%q", name), 1)
	}
	def := func(e mEntry) mEntry {
		e.conf, e.name = n.bridgeList("10.231.0.0/24"), "k8s-pod-network"
		return e
	}
	return map[string]func(i int) []mEntry{
		"conflist": func(int) []mEntry { return []mEntry{def(mEntry{})} },
		"single conf": func(int) []mEntry {
			return []mEntry{{conf: n.bridgeConf("1.0.0", "10.231.1.0/24"), name: "br-net"}, {conf: mv("1.0.0", "storage", "10.232.0.0/24"), name: "storage"}}
		},
		"cniVersion 0.3.1": func(int) []mEntry {
			return []mEntry{{conf: n.bridgeConf("0.3.1", "10.231.2.0/24"), name: "br-net"}, {conf: mv("0.3.1", "legacy", "10.232.1.0/24"), name: "legacy"}}
		},
		"static delegates": func(int) []mEntry {
			return []mEntry{def(mEntry{}), {conf: mv("1.0.0", "storage", "10.232.2.0/24"), name: "storage"}, {conf: mv("0.3.1", "legacy", "10.232.3.0/24"), name: "legacy"}}
		},
		"clusterNetwork file (v4.3.0)": func(int) []mEntry {
			return []mEntry{def(mEntry{reencoded: true, withConfigList: true}), {conf: mv("1.0.0", "storage", "10.232.4.0/24"), name: "storage"}}
		},
		"clusterNetwork dir (record lost its fields)": func(int) []mEntry {
			return []mEntry{def(mEntry{reencoded: true})}
		},
		"clusterNetwork NAD": func(int) []mEntry {
			e := def(mEntry{})
			e.name = "kube-system/k8s-pod-network"
			return []mEntry{e, {conf: mv("1.0.0", "storage", "10.232.5.0/24"), name: "storage"}}
		},
		"NADs in both shapes": func(int) []mEntry {
			return []mEntry{def(mEntry{reencoded: true, withConfigList: true}),
				{conf: mv("0.3.1", "macvlan-conf", "10.232.6.0/24"), name: "default/macvlan-conf"},
				{conf: conflist("1.0.0", "mv-list", plug(mv("1.0.0", "x", "10.232.7.0/24")), `{"type":"tuning"}`), name: "default/mv-list"}}
		},
		"runtimeConfig ips and mac": func(i int) []mEntry {
			static := strings.Replace(mv("1.0.0", "x", ""), `"subnet":"","dataDir"`, `"dataDir"`, 1)
			static = strings.Replace(static, `"type":"host-local"`, `"type":"static"`, 1)
			pl := plug(static)
			pl = strings.TrimSuffix(pl, "}") + `,"capabilities":{"ips":true}}`
			return []mEntry{def(mEntry{}),
				{conf: conflist("1.0.0", "bridge-list", pl, `{"type":"tuning","capabilities":{"mac":true}}`), name: "default/bridge-list",
					ifName: "data0", mac: fmt.Sprintf("02:11:22:33:44:%02x", 0x50+i), ips: []string{fmt.Sprintf("10.233.0.%d/24", 7+i)}}}
		},
	}
}

// assertMultusClean checks that nothing of Multus's pods is left: no
// interface in the pods, no lease, no record, no cache entry.
func assertMultusClean(t *testing.T, n *node, dir, what string, netnss ...ns.NetNS) {
	t.Helper()
	for _, netns := range netnss {
		if got := podLinks(t, netns); len(got) != 0 {
			t.Errorf("%s: pod links left: %v", what, got)
		}
	}
	assertClean(t, n, what)
	if got := recordFiles(t, dir); len(got) != 0 {
		t.Errorf("%s: files left in Multus's cniDir: %v", what, got)
	}
}

func TestMultusTakeover(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	for _, sameDir := range []bool{false, true} {
		probe := newNode(t)
		for shape := range multusShapes(probe, parent) {
			if sameDir && shape != "static delegates" && shape != "NADs in both shapes" {
				continue
			}
			name := shape
			if sameDir {
				name += ", same cniDir"
			}
			t.Run(name+"/DEL", func(t *testing.T) {
				n, dir, conf := multusNode(t, sameDir)
				list := testenv.Conf(t, conf)
				pod, netns := newPod(t)
				entries := multusShapes(n, parent)[shape](0)
				multusAttach(t, n, dir, pod, entries)
				if got := podLinks(t, netns); len(got) != len(entries) {
					t.Fatalf("Multus attached %v", got)
				}
				if len(leases(t, n.leaseDir)) == 0 && shape != "runtimeConfig ips and mac" {
					t.Fatal("no lease after Multus's ADD")
				}
				if err := n.rt.Check(ctx, list, pod); err != nil {
					t.Errorf("CHECK of what Multus attached: %v", err)
				}
				for i := 1; i <= 2; i++ {
					if err := n.rt.Del(ctx, list, pod); err != nil {
						t.Fatalf("DEL %d: %v", i, err)
					}
				}
				assertMultusClean(t, n, dir, "DEL", netns)
			})
			t.Run(name+"/GC", func(t *testing.T) {
				n, dir, conf := multusNode(t, sameDir)
				list := testenv.Conf(t, conf)
				gone, goneNS := newPod(t)
				kept, keptNS := newPod(t)
				multusAttach(t, n, dir, gone, multusShapes(n, parent)[shape](0))
				multusAttach(t, n, dir, kept, multusShapes(n, parent)[shape](1))
				before := podLinks(t, keptNS)
				runGC(t, n, conf, types.GCAttachment{ContainerID: kept.ContainerID, IfName: "eth0"})
				if got := podLinks(t, goneNS); len(got) != 0 {
					t.Errorf("GC left the stale pod's links: %v", got)
				}
				if got := podLinks(t, keptNS); fmt.Sprint(got) != fmt.Sprint(before) {
					t.Errorf("GC touched the valid pod: links %v, were %v", got, before)
				}
				for _, f := range recordFiles(t, dir) {
					if !strings.Contains(f, kept.ContainerID) {
						t.Errorf("GC left %s", f)
					}
				}
				if _, err := os.Stat(filepath.Join(dir, kept.ContainerID)); err != nil {
					t.Errorf("GC removed the valid pod's record: %v", err)
				}
				if err := n.rt.Del(ctx, list, kept); err != nil {
					t.Fatalf("DEL of the valid pod: %v", err)
				}
				assertMultusClean(t, n, dir, "GC, then DEL of the valid pod", goneNS, keptNS)
			})
		}
	}
}

// TestMultusLeftBehind: an entry of Multus's record that neither the record
// nor the cache explains fails DEL, every time, naming the network, the
// container and the record, after everything else was deleted.
func TestMultusLeftBehind(t *testing.T) {
	n, dir, conf := multusNode(t, false)
	parent := testenv.VethParent(t)
	list := testenv.Conf(t, conf)
	pod, netns := newPod(t)
	entries := multusShapes(n, parent)["static delegates"](0)
	entries[1].garbage = true
	multusAttach(t, n, dir, pod, entries)
	for i := 1; i <= 2; i++ {
		err := n.rt.Del(context.Background(), list, pod)
		if err == nil {
			t.Fatalf("DEL %d succeeded, leaving net1 behind", i)
		}
		for _, want := range []string{"storage", pod.ContainerID, filepath.Join(dir, pod.ContainerID)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("DEL %d: error %q does not name %q", i, err, want)
			}
		}
	}
	if got := podLinks(t, netns); len(got) != 1 || got["net1"] == nil {
		t.Errorf("pod links = %v, want only net1 (left behind)", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 1 {
		t.Errorf("leases = %v, want storage's only", got)
	}
	if _, err := os.Stat(filepath.Join(dir, pod.ContainerID)); err != nil {
		t.Errorf("the record that names what is left was removed: %v", err)
	}
}

// TestDelLeftBehindOwnRecord: the same for manifold's own record: an
// attachment whose recorded config does not parse, with no cache entry, was
// skipped and DEL answered success.
func TestDelLeftBehindOwnRecord(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.234.1.0/24"),
		n.macvlanConf("1.0.0", parent, "10.234.2.0/24"),
		ptpConf("1.0.0", "10.234.3.5/24")))
	pod, netns := newPod(t)
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	store := &scratch.Store{Dir: n.cniDir}
	path := store.Path(pod.ContainerID)
	rec, err := store.Load(pod.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Attachments[1].Config = json.RawMessage(`{"cniVersion":"1.0.0","name":"mv-net"}`)
	if err := store.Save(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.cniDir, "results", "mv-net-"+pod.ContainerID+"-net1")); err != nil {
		t.Fatal(err)
	}
	err = n.rt.Del(ctx, list, pod)
	if err == nil {
		t.Fatal("DEL succeeded, leaving net1 behind")
	}
	for _, want := range []string{"mv-net", pod.ContainerID, path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := podLinks(t, netns); len(got) != 1 || got["net1"] == nil {
		t.Errorf("pod links = %v, want only net1 (left behind)", got)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the record that names what is left was removed: %v", err)
	}
}
