package main_test

// What the node's files say is untrusted input (issue 26): Multus's records
// and libcni cache entries, and manifold's own libcni cache. libcni builds
// the path of an attachment's cache entry, results/<network>-<container>-<ifname>,
// from these values with no check of its own, and at DEL removes whatever
// file is there when it is not a cached result, before any plugin runs. An
// interface name or a container ID with a path in it would make manifold
// unlink any file on the node, as root.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// hostDirs is a node's own layout under a temp root: Multus's cniDir,
// manifold's, and a file elsewhere on the node that nothing may touch.
type hostDirs struct {
	multus, cni, victim string
}

const victimContent = "the node's own file"

func newHostDirs(t *testing.T) hostDirs {
	t.Helper()
	root := t.TempDir()
	d := hostDirs{
		multus: filepath.Join(root, "var/lib/cni/multus"),
		cni:    filepath.Join(root, "var/lib/cni/manifold"),
		victim: filepath.Join(root, "etc/victim"),
	}
	for _, dir := range []string{d.multus, d.cni, filepath.Dir(d.victim)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(d.victim, []byte(victimContent), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// ifNameTo is an interface name that makes libcni's cache path under cacheDir
// the file target.
func ifNameTo(t *testing.T, cacheDir, target string) string {
	t.Helper()
	rel, err := filepath.Rel(filepath.Join(cacheDir, "results"), target)
	if err != nil {
		t.Fatal(err)
	}
	return "x/../" + rel
}

func (d hostDirs) assertVictim(t *testing.T, what string) {
	t.Helper()
	if b, err := os.ReadFile(d.victim); err != nil || string(b) != victimContent {
		t.Errorf("%s: the node's file %s outside the CNI dirs is %q (%v); it was removed or changed", what, d.victim, b, err)
	}
}

// markPlugin puts a plugin named typ into binDir that leaves a mark when it
// runs, and returns the mark's path.
func markPlugin(t *testing.T, binDir, typ string) string {
	t.Helper()
	mark := filepath.Join(t.TempDir(), typ+"-ran")
	script := fmt.Sprintf("#!/bin/sh\ntouch %s\n", mark)
	if err := os.WriteFile(filepath.Join(binDir, typ), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return mark
}

// plantRecordEntry appends an entry to Multus's record of the container, as
// Multus v3/v4 saves it before any delegate runs: "Name" the NAD,
// "ifnameRequest" from the pod's annotation, "Bytes" the NAD's config.
func plantRecordEntry(t *testing.T, dir, containerID, nad, ifName, conf string) {
	t.Helper()
	path := filepath.Join(dir, containerID)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec []map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	e := map[string]any{"Name": nad, "Bytes": base64.StdEncoding.EncodeToString([]byte(conf)), "Conf": map[string]any{}, "ConfList": map[string]any{}}
	if ifName != "" {
		e["ifnameRequest"] = ifName
	}
	if b, err = json.Marshal(append(rec, e)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// plantCacheEntry writes a libcni cache entry (cniCacheV1) into
// dir/results, in a file named for the container as libcni names them.
func plantCacheEntry(t *testing.T, dir, fileContainerID, containerID, network, ifName, netns, conf string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": containerID, "config": []byte(conf), "ifName": ifName,
		"networkName": network, "netns": netns, "cniArgs": testenv.PodArgs("default", "p", "u", containerID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results", network+"-"+fileContainerID+"-planted"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantLeftBehind checks that a DEL or GC failed naming every one of subs,
// each part of a message that says what is left behind.
func wantLeftBehind(t *testing.T, what string, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded; want it to fail naming what it left behind", what)
	}
	for _, s := range append([]string{"left behind"}, subs...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not name %q", what, err, s)
		}
	}
}

// TestUntrustedMultusFiles: an entry of Multus's record or cache whose values
// fail manifold's checks is never run and never reaches libcni; DEL and GC
// delete everything else, then fail naming it, and Multus's files are kept.
func TestUntrustedMultusFiles(t *testing.T) {
	testenv.RequirePrivileged(t)
	allowed := []string{"bridge", "host-local", "macvlan", "tuning", "static"}
	for _, tc := range []struct {
		name string
		// plant adds the bad entry; it returns what the error must name
		// and a mark that a plugin leaves if it ran ("" for none).
		plant func(t *testing.T, n *node, d hostDirs, pod *testenv.Pod) (names []string, mark string)
	}{
		{"record: a path in ifnameRequest", func(t *testing.T, n *node, d hostDirs, pod *testenv.Pod) ([]string, string) {
			conf := strings.Replace(n.bridgeConf("1.0.0", "10.226.9.0/24"), `"br-net"`, `"evil"`, 1)
			plantRecordEntry(t, d.multus, pod.ContainerID, "default/evil", ifNameTo(t, d.multus, d.victim), conf)
			return []string{"default/evil", "interface name", filepath.Join(d.multus, pod.ContainerID)}, ""
		}},
		{"cache: a path in ifName", func(t *testing.T, n *node, d hostDirs, pod *testenv.Pod) ([]string, string) {
			conf := strings.Replace(n.bridgeConf("1.0.0", "10.226.9.0/24"), `"br-net"`, `"evil"`, 1)
			plantCacheEntry(t, d.multus, pod.ContainerID, pod.ContainerID, "evil", ifNameTo(t, d.multus, d.victim), pod.NetNS, conf)
			return []string{"evil", "interface name", filepath.Join(d.multus, "results")}, ""
		}},
		{"record: a NAD that runs a meta-plugin", func(t *testing.T, n *node, d hostDirs, pod *testenv.Pod) ([]string, string) {
			mark := markPlugin(t, n.rt.BinDir, "multus")
			plantRecordEntry(t, d.multus, pod.ContainerID, "default/nested", "", `{"cniVersion":"1.0.0","name":"nested","type":"multus"}`)
			return []string{"default/nested", "meta-plugin"}, mark
		}},
		{"record: a NAD outside allowedPluginTypes", func(t *testing.T, n *node, d hostDirs, pod *testenv.Pod) ([]string, string) {
			mark := markPlugin(t, n.rt.BinDir, "x")
			plantRecordEntry(t, d.multus, pod.ContainerID, "default/other", "", `{"cniVersion":"1.0.0","name":"other","type":"x"}`)
			return []string{"default/other", "allowedPluginTypes"}, mark
		}},
	} {
		for _, verb := range []string{"DEL", "GC"} {
			t.Run(tc.name+"/"+verb, func(t *testing.T) {
				n := newNode(t)
				d := newHostDirs(t)
				n.cniDir = d.cni
				conf := n.manifoldConf(t, "1.1.0", map[string]any{"multusCNIDir": d.multus, "allowedPluginTypes": allowed},
					conflist("1.0.0", "other-net", `{"type":"bridge","bridge":"mfunused0","ipam":{"type":"host-local","subnet":"10.239.0.0/24","dataDir":"`+t.TempDir()+`"}}`))
				list := testenv.Conf(t, conf)
				pod, netns := newPod(t)
				testenv.MultusAttach(t, n.rt.BinDir, d.multus, pod, []testenv.MultusEntry{{Conf: n.bridgeList("10.226.1.0/24"), Name: "k8s-pod-network"}})
				names, mark := tc.plant(t, n, d, pod)
				var err error
				if verb == "DEL" {
					err = n.rt.Del(context.Background(), list, pod)
				} else if te := execVerb(t, n, "GC", withKey(t, singlePlugin(t, conf), "cni.dev/valid-attachments", []types.GCAttachment{})); te != nil {
					err = te
				}
				d.assertVictim(t, verb)
				if mark != "" {
					if _, serr := os.Stat(mark); serr == nil {
						t.Errorf("%s ran the planted entry's plugin", verb)
					}
				}
				wantLeftBehind(t, verb, err, append(names, pod.ContainerID)...)
				if got := podLinks(t, netns); len(got) != 0 {
					t.Errorf("%s left the pod's good attachment: links %v", verb, got)
				}
				if _, err := os.Stat(filepath.Join(d.multus, pod.ContainerID)); err != nil {
					t.Errorf("Multus's record, which names what is left, was removed: %v", err)
				}
				// The runtime's retry fails the same way, and still touches nothing.
				if verb == "DEL" {
					err := n.rt.Del(context.Background(), list, pod)
					wantLeftBehind(t, "the second DEL", err, names...)
					d.assertVictim(t, "the second DEL")
				}
			})
		}
	}
}

// TestUntrustedOwnCache: the same for manifold's own libcni cache, which
// libcni reads back at DEL and at GC (GCNetworkList DELs every cached
// attachment of a network outside the valid set, with the cache's container
// ID and interface name).
func TestUntrustedOwnCache(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, tc := range []struct {
		name string
		// plant returns the valid set for GC and what the error must name.
		plant func(t *testing.T, d *hostDirs, pod *testenv.Pod, conf string) ([]types.GCAttachment, []string)
		verbs []string
	}{
		{"a path in ifName", func(t *testing.T, d *hostDirs, pod *testenv.Pod, conf string) ([]types.GCAttachment, []string) {
			plantCacheEntry(t, d.cni, pod.ContainerID, pod.ContainerID, "br-net", ifNameTo(t, d.cni, d.victim), pod.NetNS, conf)
			return []types.GCAttachment{}, []string{"br-net", "interface name", pod.ContainerID, filepath.Join(d.cni, "results")}
		}, []string{"DEL", "GC"}},
		{"a path in containerId, the pod valid", func(t *testing.T, d *hostDirs, pod *testenv.Pod, conf string) ([]types.GCAttachment, []string) {
			// libcni's path is results/br-net-<containerId>-eth0: the
			// victim is a file whose name ends in "-eth0".
			rel, err := filepath.Rel(filepath.Join(d.cni, "results"), d.victim)
			if err != nil {
				t.Fatal(err)
			}
			d.victim += "-eth0"
			if err := os.WriteFile(d.victim, []byte(victimContent), 0o644); err != nil {
				t.Fatal(err)
			}
			id := "x/../" + rel
			plantCacheEntry(t, d.cni, "planted", id, "br-net", "eth0", "", conf)
			return []types.GCAttachment{{ContainerID: pod.ContainerID, IfName: "eth0"}}, []string{"br-net", "container ID", filepath.Join(d.cni, "results")}
		}, []string{"GC"}},
	} {
		for _, verb := range tc.verbs {
			t.Run(tc.name+"/"+verb, func(t *testing.T) {
				n := newNode(t)
				d := newHostDirs(t)
				n.cniDir = d.cni
				ctx := context.Background()
				bridge := n.bridgeConf("1.1.0", "10.226.2.0/24")
				conf := n.manifoldConf(t, "1.1.0", map[string]any{"multusCNIDir": d.multus}, bridge)
				list := testenv.Conf(t, conf)
				pod, netns := newPod(t)
				if _, err := n.rt.Add(ctx, list, pod); err != nil {
					t.Fatal(err)
				}
				valid, names := tc.plant(t, &d, pod, bridge)
				var err error
				if verb == "DEL" {
					err = n.rt.Del(ctx, list, pod)
				} else if te := execVerb(t, n, "GC", withKey(t, singlePlugin(t, conf), "cni.dev/valid-attachments", valid)); te != nil {
					err = te
				}
				d.assertVictim(t, verb)
				wantLeftBehind(t, verb, err, names...)
				if len(valid) == 0 {
					if got := podLinks(t, netns); len(got) != 0 {
						t.Errorf("%s left the pod's attachment: links %v", verb, got)
					}
					return
				}
				if got := podLinks(t, netns); len(got) != 1 {
					t.Errorf("GC touched the valid pod: links %v", got)
				}
				// The planted entry is another container's: the valid pod's
				// own DEL has nothing left behind.
				if err := n.rt.Del(ctx, list, pod); err != nil {
					t.Errorf("DEL of the valid pod: %v", err)
				}
			})
		}
	}
}

// TestUntrustedMultusNetNS: a netns that Multus's cache gives (GC, and a DEL
// whose runtime sends none, use it) that is the node's own is not used: the
// plugins' DEL there would remove the node's interface of the attachment's
// name. The DEL runs without a netns, as for a netns that is gone.
func TestUntrustedMultusNetNS(t *testing.T) {
	n := newNode(t)
	d := newHostDirs(t)
	n.cniDir = d.cni
	hostLink := testenv.VethParent(t)
	conf := n.manifoldConf(t, "1.1.0", map[string]any{"multusCNIDir": d.multus},
		conflist("1.0.0", "other-net", `{"type":"bridge","bridge":"mfunused0","ipam":{"type":"host-local","subnet":"10.239.0.0/24","dataDir":"`+t.TempDir()+`"}}`))
	pod, _ := newPod(t)
	// The attachment's interface in the pod has the name of a link of the
	// node's.
	testenv.MultusAttach(t, n.rt.BinDir, d.multus, pod, []testenv.MultusEntry{{Conf: n.bridgeConf("1.0.0", "10.226.3.0/24"), Name: "k8s-pod-network", IfName: hostLink}})
	files, err := filepath.Glob(filepath.Join(d.multus, "results", "*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("Multus's cache entries: %v %v", files, err)
	}
	var entry map[string]any
	if err := json.Unmarshal(mustReadFile(t, files[0]), &entry); err != nil {
		t.Fatal(err)
	}
	entry["netns"] = fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	b, _ := json.Marshal(entry)
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if te := execVerb(t, n, "GC", withKey(t, singlePlugin(t, conf), "cni.dev/valid-attachments", []types.GCAttachment{})); te != nil {
		t.Errorf("GC: %v", te)
	}
	if !testenv.HostLinkExists(hostLink) {
		t.Errorf("GC deleted the node's own interface %s", hostLink)
	}
	if got := leases(t, n.leaseDir); len(got) != 0 {
		t.Errorf("leases left after GC: %v", got)
	}
	if got := recordFiles(t, d.multus); len(got) != 0 {
		t.Errorf("Multus's files left after GC: %v", got)
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
