// Package e2e drives bin/manifold end to end: a real etcd and kube-apiserver
// on 127.0.0.1 (e2e/controlplane), the NetworkAttachmentDefinition CRD, real
// NADs and pods, and manifold called through libcni in real network
// namespaces with the CNI_ARGS containerd sends (DESIGN §9).
//
// Two control planes serve the whole package, each started by the first test
// that needs it: the bare one (etcd and kube-apiserver) for the tests that
// drive manifold through libcni or containerd with pods bound to a node that
// does not exist, and the cluster (with kube-scheduler, kube-controller-manager
// and ServiceAccount admission) for the tests with a real kubelet. The bare
// one stays bare because on a cluster those pods would not keep still: the
// pod garbage collector deletes pods bound to a missing node after 40 s, the
// scheduler would bind a test's unbound pods to a kubelet's node, and the
// controllers' traffic would blur the API request counts that tests check.
// Both are stopped when the package ends, however it ends: normally, on a
// failed test, or on SIGINT/SIGTERM. If the test binary dies outright, the
// servers die with it (the harness sets Pdeathsig).
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

// sharedPlane is one control plane that the package's tests share.
type sharedPlane struct {
	name string
	opts controlplane.Options
	once sync.Once
	mu   sync.Mutex
	cp   *controlplane.ControlPlane
	err  error
}

var (
	sharedBare    = &sharedPlane{name: "control plane"}
	sharedCluster = &sharedPlane{name: "cluster control plane", opts: controlplane.Options{Controllers: true}}
)

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
		for _, s := range []*sharedPlane{sharedBare, sharedCluster} {
			s.mu.Lock()
			if s.cp != nil {
				fmt.Fprintf(os.Stderr, "e2e: %s logs from %s:\n%s\n", s.name, s.cp.Dir, s.cp.LogTails())
			}
			s.mu.Unlock()
		}
	}
	stopShared()
	os.Exit(code)
}

func stopShared() {
	for _, s := range []*sharedPlane{sharedBare, sharedCluster} {
		s.mu.Lock()
		if s.cp != nil {
			s.cp.Stop()
		}
		s.mu.Unlock()
	}
}

// controlPlane returns the package's bare control plane (etcd and
// kube-apiserver), starting it on first use.
func controlPlane(t *testing.T) *controlplane.ControlPlane { return sharedBare.get(t) }

// clusterPlane returns the package's control plane with kube-scheduler,
// kube-controller-manager and ServiceAccount admission, starting it on first
// use. A pod made in a new namespace there needs the namespace's "default"
// ServiceAccount first (env.namespace waits for it).
func clusterPlane(t *testing.T) *controlplane.ControlPlane { return sharedCluster.get(t) }

// get returns the shared control plane, starting it (and installing the NAD
// CRD) on first use. Without root, or without the server binaries, the test
// is skipped, except under MANIFOLD_REQUIRE_PRIVILEGED=1 where that is a
// failure; any other start failure fails every test that asks for it.
func (s *sharedPlane) get(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	testenv.RequirePrivileged(t)
	s.once.Do(func() {
		// A cold build of the binaries takes many minutes: kube-apiserver
		// alone took 26 on a loaded 2-core machine.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
		start := time.Now()
		bins, err := controlplane.FindBinaries(ctx)
		if err != nil {
			s.err = err
			return
		}
		opts := s.opts
		opts.Binaries = bins
		cp, err := controlplane.Start(ctx, opts)
		if err != nil {
			s.err = err
			return
		}
		s.mu.Lock()
		s.cp = cp
		s.mu.Unlock()
		if err := cp.InstallCRD(ctx); err != nil {
			s.err = err
			return
		}
		t.Logf("%s at %s ready in %s", s.name, cp.URL, time.Since(start).Round(time.Millisecond))
	})
	if s.err != nil {
		if errors.Is(s.err, controlplane.ErrBinariesUnavailable) && os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") != "1" {
			t.Skipf("%s binaries: %v", s.name, s.err)
		}
		t.Fatalf("start %s: %v", s.name, s.err)
	}
	return s.cp
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
