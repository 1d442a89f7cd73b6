package install

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
)

// modes runs a test with fsnotify and with the poll fallback alone.
func modes(t *testing.T, f func(t *testing.T, notify bool)) {
	t.Run("fsnotify", func(t *testing.T) { f(t, true) })
	t.Run("poll", func(t *testing.T) { f(t, false) })
}

func TestRunWaitsForPrimary(t *testing.T) {
	modes(t, func(t *testing.T, notify bool) {
		n := newTestNode(t, notify)
		n.start(t)
		eventually(t, "the wait is logged", func() error { return logHas(n.logs, "waiting for the primary CNI config") })
		// The credentials go first, even while waiting; the config must not.
		if err := fileIs(filepath.Join(n.o.credDir(), "token"), "token-1"); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(n.confOut); !os.IsNotExist(err) {
			t.Fatalf("config written before there is a primary: %v", err)
		}
		n.writeConf(t, "10-calico.conflist", calicoConflist)
		n.wantClusterNetwork(t, "10-calico.conflist", "1.0.0")
	})
}

func TestRunGivesUpWithoutPrimary(t *testing.T) {
	n := newTestNode(t, true)
	n.o.PrimaryWaitTimeout = 300 * time.Millisecond
	_, done := n.start(t)
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoPrimary) {
			t.Fatalf("Run returned %v, want ErrNoPrimary", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waiting 30s after a 300ms primary wait timeout")
	}
}

func TestRunRegeneratesOnChange(t *testing.T) {
	modes(t, func(t *testing.T, notify bool) {
		n := newTestNode(t, notify)
		n.writeConf(t, "10-bridge.conf", bridgeConf)
		n.start(t)
		n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")

		// The primary changes in place: new version and capabilities.
		n.writeConf(t, "10-bridge.conf", `{"cniVersion":"1.0.0","name":"podnet","type":"bridge","capabilities":{"bandwidth":true}}`)
		n.wantClusterNetwork(t, "10-bridge.conf", "1.0.0")
		if _, p, err := n.plugin(); err != nil || fmt.Sprint(p["capabilities"]) != "map[bandwidth:true "+netconf.CapPodAnnotations+":true]" {
			t.Fatalf("capabilities not regenerated: %v, %v", p["capabilities"], err)
		}

		// A new network plugin writes a config that sorts first.
		n.writeConf(t, "05-calico.conflist", calicoConflist)
		n.wantClusterNetwork(t, "05-calico.conflist", "1.0.0")

		// Our config is removed behind our back (some CNI installers clean the
		// dir): it comes back.
		if err := os.Remove(n.confOut); err != nil {
			t.Fatal(err)
		}
		n.wantClusterNetwork(t, "05-calico.conflist", "1.0.0")

		// The primary disappears: our config stays, with a warning.
		for _, f := range []string{"05-calico.conflist", "10-bridge.conf"} {
			if err := os.Remove(filepath.Join(n.o.CNIConfDir, f)); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "missing primary is logged", func() error { return logHas(n.logs, "the primary CNI config is gone") })
		if _, err := os.Stat(n.confOut); err != nil {
			t.Fatalf("config removed with the primary: %v", err)
		}
		assertNoTempFiles(t, n.o.CNIConfDir)
	})
}

func TestRunRefreshesToken(t *testing.T) {
	modes(t, func(t *testing.T, notify bool) {
		n := newTestNode(t, notify)
		n.writeConf(t, "10-bridge.conf", bridgeConf)
		n.start(t)
		n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
		dir := n.o.credDir()
		for _, f := range []struct{ name, want string }{{"token", "token-1"}, {"ca.crt", "ca-1"}} {
			if err := fileIs(filepath.Join(dir, f.name), f.want); err != nil {
				t.Fatal(err)
			}
		}
		kc, err := os.ReadFile(filepath.Join(dir, "manifold.kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}

		// The kubelet rotates the bound token (and the CA bundle changes).
		n.project(t, "token-2", "ca-2")
		eventually(t, "token refreshed", func() error { return fileIs(filepath.Join(dir, "token"), "token-2") })
		eventually(t, "CA refreshed", func() error { return fileIs(filepath.Join(dir, "ca.crt"), "ca-2") })
		// The kubeconfig names the files, so it does not change.
		if err := fileIs(filepath.Join(dir, "manifold.kubeconfig"), string(kc)); err != nil {
			t.Error(err)
		}
		st, err := os.Stat(filepath.Join(dir, "token"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("token file mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
	})
}

func TestRunUserConfigFile(t *testing.T) {
	n := newTestNode(t, true)
	userDir := filepath.Join(n.root, "configmap")
	if err := os.Mkdir(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(userDir, "manifold.conf")
	v1 := `{"cniVersion":"0.3.1","name":"mine","type":"manifold","clusterNetwork":"/etc/cni/net.d/99-x.conf"}` + "\n"
	if err := os.WriteFile(user, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	n.o.ConfigFile = user
	n.start(t)
	// No primary is needed; the file keeps its .conf extension.
	out := filepath.Join(n.o.CNIConfDir, "00-manifold.conf")
	eventually(t, "user config copied as is", func() error { return fileIs(out, v1) })

	v2 := `{"cniVersion":"1.0.0","name":"mine","type":"manifold","clusterNetwork":"/etc/cni/net.d/99-y.conf"}`
	if err := WriteFileAtomic(user, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "user config change copied", func() error { return fileIs(out, v2) })

	// A broken edit never replaces a working config.
	if err := WriteFileAtomic(user, []byte(`{"cniVersion":`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "broken user config is reported", func() error { return logHas(n.logs, "is not valid JSON") })
	if err := fileIs(out, v2); err != nil {
		t.Fatal(err)
	}
}

func TestRunInstallsBinary(t *testing.T) {
	n := newTestNode(t, true)
	src := filepath.Join(n.root, "image-manifold")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(n.o.CNIBinDir, "manifold")
	if err := os.WriteFile(dst, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.o.Binary = src
	n.writeConf(t, "10-bridge.conf", bridgeConf)
	n.start(t)
	n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
	if err := fileIs(dst, "#!/bin/sh\necho new\n"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("binary mode %v, %v; want 0755", st.Mode().Perm(), err)
	}
	// Thin mode has no use for the shim.
	if _, err := os.Stat(filepath.Join(n.o.CNIBinDir, "manifold-shim")); !os.IsNotExist(err) {
		t.Errorf("manifold-shim in thin mode: %v", err)
	}
}

// TestRunThick installs in thick mode: manifold and manifold-shim are both
// copied (an old shim replaced) before the config names the shim, and
// stopping with cleanup removes the config but, as for manifold, leaves the
// binaries.
func TestRunThick(t *testing.T) {
	n := newTestNode(t, true)
	n.o.CleanupConfigOnExit = true
	n.o.DaemonSocket = "/run/manifold/manifold.sock"
	binaries := map[string]string{"manifold": "#!/bin/sh\necho manifold\n", "manifold-shim": "#!/bin/sh\necho shim\n"}
	for name, data := range binaries {
		src := filepath.Join(n.root, "image-"+name)
		if err := os.WriteFile(src, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if name == "manifold-shim" {
			n.o.ShimBinary = src
		} else {
			n.o.Binary = src
		}
	}
	if err := os.WriteFile(filepath.Join(n.o.CNIBinDir, "manifold-shim"), []byte("old shim"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.writeConf(t, "10-bridge.conf", bridgeConf)
	cancel, done := n.start(t)
	n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
	_, p, err := n.plugin()
	if err != nil {
		t.Fatal(err)
	}
	if p["type"] != "manifold-shim" || p["daemonSocket"] != "/run/manifold/manifold.sock" {
		t.Errorf("type %v, daemonSocket %v; want manifold-shim and /run/manifold/manifold.sock", p["type"], p["daemonSocket"])
	}
	checkBinaries := func() {
		t.Helper()
		for name, data := range binaries {
			dst := filepath.Join(n.o.CNIBinDir, name)
			if err := fileIs(dst, data); err != nil {
				t.Error(err)
			}
			if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("%s: mode %v, %v; want 0755", dst, st.Mode().Perm(), err)
			}
		}
	}
	checkBinaries()
	assertNoTempFiles(t, n.o.CNIBinDir)

	stopRun(t, cancel, done)
	if _, err := os.Stat(n.confOut); !os.IsNotExist(err) {
		t.Errorf("config after a stop with cleanup: %v, want it removed", err)
	}
	checkBinaries()
}

// TestRunSwitchToThick: daemonset-thick.yaml is applied while the thin
// DaemonSet runs, then the thin one is deleted. The thick installer waits,
// the thin one leaves the config in place on its way out, and the thick one
// turns it into a thick config, so the node never runs without manifold.
func TestRunSwitchToThick(t *testing.T) {
	thin, stopThin, thinDone := startedBridgeNode(t)
	thick := thin.successor()
	thick.o.DaemonSocket = "/run/manifold/manifold.sock"
	stopThick, thickDone := thick.start(t)
	eventually(t, "the thick installer waits", func() error { return logHas(thick.logs, "waiting for it to stop") })

	stopRun(t, stopThin, thinDone)
	if _, err := os.Stat(thin.confOut); err != nil {
		t.Fatalf("the thin installer removed the config while the thick one runs: %v", err)
	}
	eventually(t, "the config turns thick", func() error {
		_, p, err := thick.plugin()
		if err != nil {
			return err
		}
		if p["type"] != "manifold-shim" || p["daemonSocket"] != thick.o.DaemonSocket {
			return fmt.Errorf("type %v, daemonSocket %v", p["type"], p["daemonSocket"])
		}
		return nil
	})
	stopRun(t, stopThick, thickDone)
}

func TestRunCleanupOnExit(t *testing.T) {
	for _, cleanup := range []bool{true, false} {
		t.Run(fmt.Sprintf("cleanup=%v", cleanup), func(t *testing.T) {
			n := newTestNode(t, true)
			n.o.CleanupConfigOnExit = cleanup
			n.writeConf(t, "10-bridge.conf", bridgeConf)
			cancel, done := n.start(t)
			n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
			stopRun(t, cancel, done)
			_, err := os.Stat(n.confOut)
			if gone := os.IsNotExist(err); gone != cleanup {
				t.Fatalf("config gone = %v (%v), want %v", gone, err, cleanup)
			}
			// The primary is never touched.
			if err := fileIs(filepath.Join(n.o.CNIConfDir, "10-bridge.conf"), bridgeConf); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShutdownSparesOthersConfig: with a DaemonSet rolling out with surge, the
// new installer may write its config before the old one stops; the old one
// must not remove it.
func TestShutdownSparesOthersConfig(t *testing.T) {
	n := newTestNode(t, true)
	n.o.CleanupConfigOnExit = true
	in := &installer{o: n.o, log: slog.New(slog.NewTextHandler(n.logs, nil)), written: []byte("ours\n")}
	n.writeConf(t, DefaultConfigName, "newer\n")
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := fileIs(n.confOut, "newer\n"); err != nil {
		t.Fatalf("another installer's config was touched: %v", err)
	}
	n.writeConf(t, DefaultConfigName, "ours\n")
	if err := in.shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.confOut); !os.IsNotExist(err) {
		t.Fatalf("our own config survived shutdown: %v", err)
	}
}

// TestRunDuringRollout runs two installers on one node, as a DaemonSet
// rollout with maxSurge does. The new one waits while the old one is active
// (no fight over the token), the old one stopping leaves the config in place,
// the new one then takes over with its own token, and the last one stopping
// removes the config.
func TestRunDuringRollout(t *testing.T) {
	old, stopOld, oldDone := startedBridgeNode(t)
	// The new pod has its own token volume.
	newer := old.successor()
	newer.saDir, newer.saGen = filepath.Join(old.root, "sa-new"), 0
	if err := os.Mkdir(newer.saDir, 0o755); err != nil {
		t.Fatal(err)
	}
	newer.o.TokenFile, newer.o.CAFile = filepath.Join(newer.saDir, "token"), filepath.Join(newer.saDir, "ca.crt")
	newer.project(t, "token-new", "ca-1")
	stopNew, newDone := newer.start(t)
	eventually(t, "the new installer waits", func() error { return logHas(newer.logs, "waiting for it to stop") })
	hostToken := filepath.Join(old.o.credDir(), "token")
	if err := fileIs(hostToken, "token-1"); err != nil {
		t.Fatalf("the waiting installer touched the token: %v", err)
	}

	// An installer stopped while it waits leaves everything alone.
	third := newer.successor()
	stopThird, thirdDone := third.start(t)
	eventually(t, "a third installer waits", func() error { return logHas(third.logs, "waiting for it to stop") })
	stopRun(t, stopThird, thirdDone)
	if _, err := os.Stat(old.confOut); err != nil {
		t.Fatalf("an installer stopped while waiting removed the config: %v", err)
	}

	stopRun(t, stopOld, oldDone)
	if _, err := os.Stat(old.confOut); err != nil {
		t.Fatalf("the old installer removed the config while the new one runs: %v", err)
	}
	if err := logHas(old.logs, "another manifold installer runs on this node"); err != nil {
		t.Error(err)
	}
	eventually(t, "the new installer takes over", func() error { return fileIs(hostToken, "token-new") })

	stopRun(t, stopNew, newDone)
	if _, err := os.Stat(old.confOut); !os.IsNotExist(err) {
		t.Fatalf("the last installer left the config: %v", err)
	}
}

// stopRun stops a Run started with testNode.start and checks that it returns
// nil within 30s.
func stopRun(t *testing.T, cancel func(), done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v on stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30s")
	}
}

// startedBridgeNode is a node with a bridge primary and an installer running
// with --cleanup-config-on-exit, its config in place.
func startedBridgeNode(t *testing.T) (*testNode, func(), <-chan error) {
	t.Helper()
	n := newTestNode(t, true)
	n.o.CleanupConfigOnExit = true
	n.writeConf(t, "10-bridge.conf", bridgeConf)
	cancel, done := n.start(t)
	n.wantClusterNetwork(t, "10-bridge.conf", "0.4.0")
	return n, cancel, done
}

// successor is the next pod's installer on the same node, as a rollout starts
// it: the same dirs and options (its own copy) and a log of its own.
func (n *testNode) successor() *testNode {
	next := *n
	o := *n.o
	next.o, next.logs = &o, &testenv.SyncBuffer{}
	return &next
}
