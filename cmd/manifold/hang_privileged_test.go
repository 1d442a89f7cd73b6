package main_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// hangingDelete is a plugin (a shell script in the node's bin dir) whose ADD
// succeeds at once and whose DEL hangs for 30 s, until the file release
// exists. exec makes the sleep the plugin's own process, so killing the plugin
// leaves no child behind.
func hangingDelete(t *testing.T, n *node) (name, release string) {
	release = filepath.Join(t.TempDir(), "release")
	script := `#!/bin/sh
case "$CNI_COMMAND" in
ADD) echo '{"cniVersion":"1.0.0"}' ;;
DEL) [ -e ` + release + ` ] || exec sleep 30 ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}' ;;
esac
`
	if err := os.WriteFile(filepath.Join(n.rt.BinDir, "hangdel"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return "hangdel", release
}

// wantKilled checks a call's error: code 11, naming the network, saying that
// the plugin was killed and why.
func wantKilled(t *testing.T, verb string, err error, network string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Fatalf("%s error = %v, want code 11", verb, err)
	}
	for _, s := range []string{network, "was killed before it answered", "callTimeout 2s"} {
		if !strings.Contains(te.Msg, s) {
			t.Errorf("%s error %q does not say %q", verb, te.Msg, s)
		}
	}
}

// TestHungDelegateAdd: a delegate whose ADD never returns is killed when the
// call's callTimeout passes; the ADD fails with a message that says so, what
// was attached is undone, and the container's lock is free: a DEL right after
// succeeds at once. Before callTimeout the ADD waited as long as the plugin
// did, and every other call on the pod waited for the lock.
func TestHungDelegateAdd(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	dir := t.TempDir()
	reached := filepath.Join(dir, "reached")
	delegates := []string{
		n.bridgeConf("1.0.0", "10.241.2.0/24"),
		// The gate plugin holds the ADD open until "never" exists (60 s).
		gated(n.macvlanConf("1.0.0", parent, "10.241.3.0/24"), reached, filepath.Join(dir, "never")),
	}
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"callTimeout": "2s"}, delegates...))
	pod, netns := newPod(t)
	_, err := n.rt.Add(context.Background(), conf, pod)
	wantKilled(t, "ADD", err, "net1")
	if _, err := os.Stat(reached); err != nil {
		t.Errorf("the gate was never reached, so nothing hung: %v", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("links left in the pod after the failed ADD: %v", got)
	}
	if err := n.rt.Del(context.Background(), conf, pod); err != nil {
		t.Errorf("DEL after the killed ADD: %v", err)
	}
	assertClean(t, n, "after the killed ADD")
}

// TestHungDelegateDel: a delegate whose DEL hangs is killed at callTimeout,
// and the other delegates are still deleted: each DEL has a budget of its own.
// The DEL fails (code 11), so the runtime tries again, and once the plugin
// answers, the retry finishes the job.
func TestHungDelegateDel(t *testing.T) {
	n := newNode(t)
	name, release := hangingDelete(t, n)
	delegates := []string{
		n.bridgeConf("1.0.0", "10.241.4.0/24"),
		`{"cniVersion":"1.0.0","name":"hanging","type":"` + name + `"}`,
	}
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"callTimeout": "2s"}, delegates...))
	pod, netns := newPod(t)
	if _, err := n.rt.Add(context.Background(), conf, pod); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	err := n.rt.Del(context.Background(), conf, pod)
	wantKilled(t, "DEL", err, "hanging")
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("the default network was not deleted after the hung DEL: links %v", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 0 {
		t.Errorf("leases left after the hung DEL: %v", got)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.rt.Del(context.Background(), conf, pod); err != nil {
		t.Errorf("DEL once the plugin answers: %v", err)
	}
	assertClean(t, n, "after the retried DEL")
}
