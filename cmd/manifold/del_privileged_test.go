package main_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestDelWithNothingRecorded: a pod attached directly (before manifold, its
// libcni cache elsewhere) has neither a record nor a cache entry of manifold's;
// DEL deletes its default network as the config names it, and a second DEL
// succeeds.
func TestDelWithNothingRecorded(t *testing.T) {
	n := newNode(t)
	def := n.bridgeConf("1.0.0", "10.217.1.0/24")
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil, def))
	pod, netns := newPod(t)
	pod.Args = append([][2]string{{"IgnoreUnknown", "1"}}, pod.Args...)
	before := testenv.NewRuntime(t, n.rt.BinDir)
	defList := testenv.Conf(t, []byte(conflist("1.0.0", "br-net", pluginOf(t, def))))
	if _, err := before.Add(context.Background(), defList, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = before.Del(context.Background(), defList, pod) })
	if got := leases(t, n.leaseDir); len(got) != 1 {
		t.Fatalf("leases after the direct ADD = %v", got)
	}

	for i := 1; i <= 2; i++ {
		if err := n.rt.Del(context.Background(), list, pod); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v", got)
	}
	assertClean(t, n, "DEL")
}

// TestDelUnknownVersionRecord: DEL of a container whose record is of another
// format version deletes everything in the libcni cache, then the record.
func TestDelUnknownVersionRecord(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.218.1.0/24"),
		n.macvlanConf("1.0.0", parent, "10.218.2.0/24")))
	pod, netns := newPod(t)
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.cniDir, pod.ContainerID)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.rt.Del(ctx, list, pod); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v", got)
	}
	assertClean(t, n, "DEL")
}
