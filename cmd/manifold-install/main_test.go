package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestSIGTERM builds the installer, runs it against temp dirs that stand in
// for the host, and stops it with SIGTERM as the kubelet does. With
// --cleanup-config-on-exit the config is gone afterwards; without it, it stays.
// In thick mode (--daemon-socket) the shim is installed too, and the config
// names it; the binaries stay after a stop either way.
func TestSIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manifold-install")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build installer: %v\n%s", err, out)
	}
	for _, tc := range []struct{ cleanup, thick bool }{{true, false}, {false, false}, {true, true}} {
		cleanup := tc.cleanup
		t.Run(fmt.Sprintf("cleanup=%v,thick=%v", cleanup, tc.thick), func(t *testing.T) {
			root := t.TempDir()
			confDir := filepath.Join(root, "host/etc/cni/net.d")
			binDir := filepath.Join(root, "host/opt/cni/bin")
			saDir := filepath.Join(root, "sa")
			for _, d := range []string{confDir, binDir, saDir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := func(path, data string) {
				if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(saDir, "token"), "token-1")
			write(filepath.Join(saDir, "ca.crt"), "ca-1")
			write(filepath.Join(root, "manifold"), "plugin binary")
			write(filepath.Join(root, "manifold-shim"), "shim binary")
			primary := `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge"}]}`
			write(filepath.Join(confDir, "10-bridge.conflist"), primary)

			cmd := exec.Command(bin,
				"--cni-conf-dir="+confDir,
				"--cni-bin-dir="+binDir,
				"--binary="+filepath.Join(root, "manifold"),
				"--token-file="+filepath.Join(saDir, "token"),
				"--ca-file="+filepath.Join(saDir, "ca.crt"),
				fmt.Sprintf("--cleanup-config-on-exit=%v", cleanup),
			)
			// Thin mode copies no shim: the bin dir must hold manifold alone.
			wantType, binaries := `"type": "manifold"`, map[string]string{"manifold": "plugin binary"}
			if tc.thick {
				cmd.Args = append(cmd.Args, "--daemon-socket=/run/manifold/manifold.sock", "--shim-binary="+filepath.Join(root, "manifold-shim"))
				wantType, binaries["manifold-shim"] = `"type": "manifold-shim"`, "shim binary"
			}
			cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443")
			stderr := &testenv.SyncBuffer{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("installer stderr:\n%s", stderr.String())
				}
			})

			conf := filepath.Join(confDir, "00-manifold.conflist")
			deadline := time.Now().Add(30 * time.Second)
			for {
				data, err := os.ReadFile(conf)
				if err == nil && strings.Contains(string(data), `"clusterNetwork": "/etc/cni/net.d/10-bridge.conflist"`) {
					if !strings.Contains(string(data), wantType) {
						t.Fatalf("config without %s:\n%s", wantType, data)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no config after 30s: %v %s", err, data)
				}
				time.Sleep(20 * time.Millisecond)
			}
			checkBinaries := func() {
				t.Helper()
				entries, err := os.ReadDir(binDir)
				if err != nil || len(entries) != len(binaries) {
					t.Fatalf("bin dir holds %v (%v), want exactly %v", entries, err, binaries)
				}
				for name, want := range binaries {
					if got, err := os.ReadFile(filepath.Join(binDir, name)); err != nil || string(got) != want {
						t.Fatalf("%s not installed: %q, %v", name, got, err)
					}
				}
			}
			checkBinaries()

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				stopped = true
				if err != nil {
					t.Fatalf("installer exited with %v after SIGTERM", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("installer still running 30s after SIGTERM")
			}
			_, err := os.Stat(conf)
			if gone := errors.Is(err, os.ErrNotExist); gone != cleanup {
				t.Fatalf("config gone = %v (%v), want %v", gone, err, cleanup)
			}
			checkBinaries()
			// Only our config is ever removed.
			if got, err := os.ReadFile(filepath.Join(confDir, "10-bridge.conflist")); err != nil || string(got) != primary {
				t.Fatalf("primary config changed: %q, %v", got, err)
			}
		})
	}
}
