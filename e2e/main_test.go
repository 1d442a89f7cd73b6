// Package e2e drives bin/manifold end to end: a real etcd and kube-apiserver
// on 127.0.0.1 (e2e/controlplane), the NetworkAttachmentDefinition CRD, real
// NADs and pods, and manifold called through libcni in real network
// namespaces with the CNI_ARGS containerd sends (DESIGN §9).
//
// One control plane serves the whole package. It is started by the first test
// that needs it and stopped when the package ends, however it ends: normally,
// on a failed test, or on SIGINT/SIGTERM. If the test binary dies outright,
// the servers die with it (the harness sets Pdeathsig).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

var shared struct {
	once sync.Once
	mu   sync.Mutex
	cp   *controlplane.ControlPlane
	err  error
}

func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "e2e: %v: stopping the nodes and the control plane\n", s)
		crinode.StopAll()
		stopShared()
		os.Exit(130)
	}()
	cleanBin := buildManifoldOnce()
	code := m.Run()
	cleanBin()
	if code != 0 {
		shared.mu.Lock()
		if shared.cp != nil {
			fmt.Fprintf(os.Stderr, "e2e: control plane logs from %s:\n%s\n", shared.cp.Dir, shared.cp.LogTails())
		}
		shared.mu.Unlock()
	}
	stopShared()
	os.Exit(code)
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cp != nil {
		shared.cp.Stop()
	}
}

// controlPlane returns the package's control plane, starting it (and
// installing the NAD CRD) on first use. Without root, or without the server
// binaries, the test is skipped, except under MANIFOLD_REQUIRE_PRIVILEGED=1
// where that is a failure; any other start failure fails every test.
func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	testenv.RequirePrivileged(t)
	shared.once.Do(func() {
		// A cold build of the binaries takes about ten minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
		defer cancel()
		start := time.Now()
		bins, err := controlplane.FindBinaries(ctx)
		if err != nil {
			shared.err = err
			return
		}
		cp, err := controlplane.Start(ctx, controlplane.Options{Binaries: bins})
		if err != nil {
			shared.err = err
			return
		}
		shared.mu.Lock()
		shared.cp = cp
		shared.mu.Unlock()
		if err := cp.InstallCRD(ctx); err != nil {
			shared.err = err
			return
		}
		t.Logf("control plane at %s ready in %s", cp.URL, time.Since(start).Round(time.Millisecond))
	})
	if shared.err != nil {
		if errors.Is(shared.err, controlplane.ErrBinariesUnavailable) && os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") != "1" {
			t.Skipf("control plane binaries: %v", shared.err)
		}
		t.Fatalf("start control plane: %v", shared.err)
	}
	return shared.cp
}

// buildManifoldOnce builds manifold for the whole package when MANIFOLD_BIN
// does not name one already (make test sets it), so that each test's bin dir
// links the same binary instead of building its own.
func buildManifoldOnce() (cleanup func()) {
	if os.Getenv("MANIFOLD_BIN") != "" || os.Geteuid() != 0 {
		return func() {}
	}
	dir, err := os.MkdirTemp("", "manifold-e2e-bin-")
	if err != nil {
		return func() {}
	}
	root, err := controlplane.RepoRoot()
	bin := filepath.Join(dir, "manifold")
	if err == nil {
		// `manifold daemon` runs the manifold-daemon next to it.
		for _, c := range [][2]string{{bin, "./cmd/manifold"}, {filepath.Join(dir, "manifold-daemon"), "./cmd/manifold-daemon"}} {
			cmd := exec.Command("go", "build", "-o", c[0], c[1])
			cmd.Dir = root
			var out []byte
			if out, err = cmd.CombinedOutput(); err != nil {
				err = fmt.Errorf("%w: %s", err, out)
				break
			}
		}
	}
	if err != nil {
		// Each test then builds its own (testenv.Manifold) and reports the error.
		fmt.Fprintf(os.Stderr, "e2e: build manifold: %v\n", err)
		_ = os.RemoveAll(dir)
		return func() {}
	}
	os.Setenv("MANIFOLD_BIN", bin)
	return func() { _ = os.RemoveAll(dir) }
}
