package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// evilBinDir is a directory that a tenant could control on the host (their
// pod's volume), holding a plugin "x" that leaves a mark when it runs.
func evilBinDir(t *testing.T) (dir, mark string) {
	dir = t.TempDir()
	mark = filepath.Join(t.TempDir(), "x-ran")
	script := fmt.Sprintf("#!/bin/sh\ntouch %s\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.241.9.9/24\"}]}'\n", mark)
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, mark
}

// TestNestedManifoldRefuses: manifold run as a delegate of manifold refuses
// before it reads its config, whichever way it was reached: as a network's
// plugin, or as a plugin's IPAM (the bridge plugin runs its "ipam"."type"
// from the same bin dirs, with the network's whole config). Without the
// refusal the nested manifold obeys the network's binDir and runs the
// tenant's binary as root. These networks are static here, so that the
// defence in depth is tested alone: networks from NADs are refused earlier,
// by type (e2e TestMetaPluginNADsRefused).
func TestNestedManifoldRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nested func(n *node, evil string) string
	}{
		{"as a plugin", func(n *node, evil string) string {
			return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"evil","type":"manifold","binDir":%q,"cniDir":%q,
				"delegates":[{"cniVersion":"1.0.0","name":"x","type":"x"}]}`, evil, filepath.Join(n.cniDir, "nested"))
		}},
		{"as IPAM", func(n *node, evil string) string {
			// The same bridge as the default network's: the test removes it.
			// The IPAM plugin gets the network's whole config: the keys
			// that manifold would obey sit beside "ipam", where the bridge
			// plugin ignores them.
			return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"evil","type":"bridge","bridge":%q,"ipam":{"type":"manifold"},
				"binDir":%q,"cniDir":%q,"delegates":[{"cniVersion":"1.0.0","name":"x","type":"x"}]}`,
				n.bridge, evil, filepath.Join(n.cniDir, "nested"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			evil, mark := evilBinDir(t)
			conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil, n.bridgeConf("1.0.0", "10.241.1.0/24"), tc.nested(n, evil)))
			pod, _ := newPod(t)
			_, err := n.rt.Add(context.Background(), conf, pod)
			var te *types.Error
			if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, "delegate of manifold") {
				t.Errorf("ADD error = %v, want code 7 saying manifold refuses to run as a delegate of manifold", err)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Errorf("the binary from the network's binDir ran as root")
			}
			if err := n.rt.Del(context.Background(), conf, pod); err != nil {
				t.Errorf("DEL: %v", err)
			}
			assertClean(t, n, "after the refused ADD and its DEL")
		})
	}
}
