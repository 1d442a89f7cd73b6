package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/scratch"
)

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
func multusShapes(n *node, parent string) map[string]func(i int) []testenv.MultusEntry {
	mv := func(version, name, subnet string) string {
		return strings.Replace(n.macvlanConf(version, parent, subnet), `"mv-net"`, fmt.Sprintf("%q", name), 1)
	}
	def := func(e testenv.MultusEntry) testenv.MultusEntry {
		e.Conf, e.Name = n.bridgeList("10.237.0.0/24"), "k8s-pod-network"
		return e
	}
	return map[string]func(i int) []testenv.MultusEntry{
		"conflist": func(int) []testenv.MultusEntry { return []testenv.MultusEntry{def(testenv.MultusEntry{})} },
		"single conf": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{{Conf: n.bridgeConf("1.0.0", "10.237.1.0/24"), Name: "br-net"}, {Conf: mv("1.0.0", "storage", "10.238.0.0/24"), Name: "storage"}}
		},
		"cniVersion 0.3.1": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{{Conf: n.bridgeConf("0.3.1", "10.237.2.0/24"), Name: "br-net"}, {Conf: mv("0.3.1", "legacy", "10.238.1.0/24"), Name: "legacy"}}
		},
		"static delegates": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{def(testenv.MultusEntry{}), {Conf: mv("1.0.0", "storage", "10.238.2.0/24"), Name: "storage"}, {Conf: mv("0.3.1", "legacy", "10.238.3.0/24"), Name: "legacy"}}
		},
		"clusterNetwork file (v4.3.0)": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{def(testenv.MultusEntry{Reencoded: true, WithConfigList: true}), {Conf: mv("1.0.0", "storage", "10.238.4.0/24"), Name: "storage"}}
		},
		"clusterNetwork dir (record lost its fields)": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{def(testenv.MultusEntry{Reencoded: true})}
		},
		"clusterNetwork NAD": func(int) []testenv.MultusEntry {
			e := def(testenv.MultusEntry{})
			e.Name = "kube-system/k8s-pod-network"
			return []testenv.MultusEntry{e, {Conf: mv("1.0.0", "storage", "10.238.5.0/24"), Name: "storage"}}
		},
		"NADs in both shapes": func(int) []testenv.MultusEntry {
			return []testenv.MultusEntry{def(testenv.MultusEntry{Reencoded: true, WithConfigList: true}),
				{Conf: mv("0.3.1", "macvlan-conf", "10.238.6.0/24"), Name: "default/macvlan-conf"},
				{Conf: conflist("1.0.0", "mv-list", plug(mv("1.0.0", "x", "10.238.7.0/24")), `{"type":"tuning"}`), Name: "default/mv-list"}}
		},
		"runtimeConfig ips and mac": func(i int) []testenv.MultusEntry {
			static := strings.Replace(mv("1.0.0", "x", ""), `"subnet":"","dataDir"`, `"dataDir"`, 1)
			static = strings.Replace(static, `"type":"host-local"`, `"type":"static"`, 1)
			pl := plug(static)
			pl = strings.TrimSuffix(pl, "}") + `,"capabilities":{"ips":true}}`
			return []testenv.MultusEntry{def(testenv.MultusEntry{}),
				{Conf: conflist("1.0.0", "bridge-list", pl, `{"type":"tuning","capabilities":{"mac":true}}`), Name: "default/bridge-list",
					IfName: "data0", MAC: fmt.Sprintf("02:11:22:33:44:%02x", 0x50+i), IPs: []string{fmt.Sprintf("10.239.0.%d/24", 7+i)}}}
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
				testenv.MultusAttach(t, n.rt.BinDir, dir, pod, entries)
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
				testenv.MultusAttach(t, n.rt.BinDir, dir, gone, multusShapes(n, parent)[shape](0))
				testenv.MultusAttach(t, n.rt.BinDir, dir, kept, multusShapes(n, parent)[shape](1))
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
	entries[1].Garbage = true
	testenv.MultusAttach(t, n.rt.BinDir, dir, pod, entries)
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
