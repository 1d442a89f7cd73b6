package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/scratch"
)

// gcNoop is a noop plugin entry that logs every call (GC included, with its
// valid set) to a fresh command log, whose path it returns: a stand-in for a
// plugin that implements GC (none of the reference plugins of v1.9 does). It
// answers ADD with an empty result, so it goes first in a conflist.
func gcNoop(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	dbg, cmdLog := filepath.Join(dir, "debug.json"), filepath.Join(dir, "cmdlog.json")
	if err := (&debug.Debug{ReportResult: `{"cniVersion":"1.0.0"}`}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cmdLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"type":"noop","debugFile":%q,"commandLog":%q}`, dbg, cmdLog), cmdLog
}

// conflist makes a conflist of plugin entries.
func conflist(version, name string, plugins ...string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[%s]}`, version, name, strings.Join(plugins, ","))
}

// pluginOf strips cniVersion and name from a single-plugin config, for a conflist.
func pluginOf(t *testing.T, conf string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "cniVersion")
	delete(m, "name")
	b, _ := json.Marshal(m)
	return string(b)
}

// gcValidSets returns the valid set of every GC call in a noop command log.
func gcValidSets(t *testing.T, cmdLog string) [][]types.GCAttachment {
	t.Helper()
	entries, err := debug.ReadCommandLog(cmdLog)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]types.GCAttachment
	for _, e := range entries {
		if e.Command != "GC" {
			continue
		}
		var in struct {
			Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
		}
		if err := json.Unmarshal(e.CmdArgs.StdinData, &in); err != nil {
			t.Fatal(err)
		}
		out = append(out, in.Valid)
	}
	return out
}

// runGC runs manifold's GC with the runtime's valid set.
func runGC(t *testing.T, n *node, conflist []byte, valid ...types.GCAttachment) {
	t.Helper()
	if valid == nil {
		valid = []types.GCAttachment{}
	}
	if te := execVerb(t, n, "GC", withKey(t, singlePlugin(t, conflist), "cni.dev/valid-attachments", valid)); te != nil {
		t.Fatalf("GC: %v", te)
	}
}

// TestGCKeepsValidContainerWithUnreadableRecord: a container the runtime lists
// as valid keeps every attachment and address through GC, whatever its record
// looks like: torn, too large to read, or of another format version (a
// manifold upgrade or rollback).
func TestGCKeepsValidContainerWithUnreadableRecord(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"torn":      func(b []byte) []byte { return b[:len(b)/2] },
		"too large": func(b []byte) []byte { return append(b, bytes.Repeat([]byte(" "), scratch.MaxRecordBytes)...) },
		"version 2": func(b []byte) []byte { return bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1) },
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			parent := testenv.VethParent(t)
			ctx := context.Background()
			conf := n.manifoldConf(t, "1.1.0", nil,
				n.bridgeConf("1.1.0", "10.214.1.0/24"),
				n.macvlanConf("1.1.0", parent, "10.214.2.0/24"))
			list := testenv.Conf(t, conf)
			pod, netns := newPod(t)
			if _, err := n.rt.Add(ctx, list, pod); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.rt.Del(ctx, list, pod) })
			path := filepath.Join(n.cniDir, pod.ContainerID)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, damage(b), 0o600); err != nil {
				t.Fatal(err)
			}

			runGC(t, n, conf, types.GCAttachment{ContainerID: pod.ContainerID, IfName: "eth0"})
			if got := podLinks(t, netns); len(got["eth0"]) != 1 || len(got["net1"]) != 1 {
				t.Errorf("valid pod's links after GC = %v, want eth0 and net1 with their addresses", got)
			}
			if got := leases(t, n.leaseDir); len(got) != 2 {
				t.Errorf("valid pod's leases after GC = %v, want 2", got)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("valid pod's record is gone: %v", err)
			}
		})
	}
}

// TestGCKeepsPodAttachedBeforeManifold: a pod attached to the default network
// directly (as by Multus, before manifold was installed) has no record and no
// cache entry of manifold's. Its default network's GC gets the runtime's valid
// set, so a plugin that frees what is not in it keeps that pod's address.
func TestGCKeepsPodAttachedBeforeManifold(t *testing.T) {
	n := newNode(t)
	noop, cmdLog := gcNoop(t)
	def := conflist("1.1.0", "br-net", noop, pluginOf(t, n.bridgeConf("1.1.0", "10.215.1.0/24")))
	conf := n.manifoldConf(t, "1.1.0", nil, def)

	old, oldNS := newPod(t)
	old.Args = append([][2]string{{"IgnoreUnknown", "1"}}, old.Args...)
	before := testenv.NewRuntime(t, n.rt.BinDir) // its own libcni cache, not manifold's
	defList := testenv.Conf(t, []byte(def))
	if _, err := before.Add(context.Background(), defList, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = before.Del(context.Background(), defList, old) })

	runGC(t, n, conf, types.GCAttachment{ContainerID: old.ContainerID, IfName: "eth0"})
	sets := gcValidSets(t, cmdLog)
	if len(sets) != 1 || !slices.Contains(sets[0], types.GCAttachment{ContainerID: old.ContainerID, IfName: "eth0"}) {
		t.Errorf("default network's GC valid sets = %v, want one call whose set holds %s/eth0", sets, old.ContainerID)
	}
	if got := podLinks(t, oldNS); len(got["eth0"]) != 1 {
		t.Errorf("pre-manifold pod's links after GC = %v", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 1 {
		t.Errorf("pre-manifold pod's leases after GC = %v, want 1", got)
	}
}

// TestGCSameNameTwoConfigs: two networks with the same CNI name and different
// plugins each get GC, each with the valid attachments of both, and neither's
// valid attachments are deleted.
func TestGCSameNameTwoConfigs(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	noopA, logA := gcNoop(t)
	noopB, logB := gcNoop(t)
	a := conflist("1.1.0", "dup-net", noopA, pluginOf(t, ptpConf("1.1.0", "10.216.3.7/24")))
	b := conflist("1.1.0", "dup-net", noopB, pluginOf(t, n.macvlanConf("1.1.0", parent, "10.216.2.0/24")))
	conf := n.manifoldConf(t, "1.1.0", nil, n.bridgeConf("1.1.0", "10.216.1.0/24"), a, b)
	list := testenv.Conf(t, conf)
	ctx := context.Background()
	pod, netns := newPod(t)
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, list, pod) })

	runGC(t, n, conf, types.GCAttachment{ContainerID: pod.ContainerID, IfName: "eth0"})
	for _, l := range []string{logA, logB} {
		sets := gcValidSets(t, l)
		if len(sets) != 1 {
			t.Errorf("GC calls logged in %s = %d, want 1: each config with the name gets GC", l, len(sets))
			continue
		}
		for _, ifname := range []string{"net1", "net2"} {
			if !slices.Contains(sets[0], types.GCAttachment{ContainerID: pod.ContainerID, IfName: ifname}) {
				t.Errorf("GC valid set %v lacks %s: every config of a name must carry the valid attachments of all", sets[0], ifname)
			}
		}
	}
	if got := podLinks(t, netns); len(got) != 3 {
		t.Errorf("valid pod's links after GC = %v, want eth0, net1, net2", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 2 {
		t.Errorf("valid pod's leases after GC = %v, want 2", got)
	}
}

// TestClusterNetworkForms: STATUS and GC reach the default network in every
// form clusterNetwork can take without an API server: a file, a directory and
// a name in confDir (the NAD form is in e2e, TestNodeVerbsClusterNetworkNAD).
func TestClusterNetworkForms(t *testing.T) {
	for _, form := range []string{"file", "dir", "name"} {
		t.Run(form, func(t *testing.T) {
			n := newNode(t)
			noop, cmdLog := gcNoop(t)
			confDir := filepath.Join(n.cniDir, "net.d")
			dir := filepath.Join(t.TempDir(), "dir")
			for _, d := range []string{confDir, dir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cl := conflist("1.1.0", "cl-net", noop)
			ref := map[string]string{"file": filepath.Join(dir, "10-cl.conflist"), "dir": dir, "name": "cl-net"}[form]
			target := filepath.Join(dir, "10-cl.conflist")
			if form == "name" {
				target = filepath.Join(confDir, "10-cl.conflist")
			}
			if err := os.WriteFile(target, []byte(cl), 0o644); err != nil {
				t.Fatal(err)
			}
			conf := n.manifoldConf(t, "1.1.0", map[string]any{"clusterNetwork": ref})
			if te := execVerb(t, n, "STATUS", singlePlugin(t, conf)); te != nil {
				t.Fatalf("STATUS with clusterNetwork %s: %v", ref, te)
			}
			runGC(t, n, conf)
			entries, err := debug.ReadCommandLog(cmdLog)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Command)
			}
			if strings.Join(got, ",") != "STATUS,GC" {
				t.Errorf("calls that reached the default network = %v, want STATUS,GC", got)
			}
		})
	}
}
