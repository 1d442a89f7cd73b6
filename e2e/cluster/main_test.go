package cluster_test

// The cluster tier (DESIGN §9, issue 27): manifold installed on a one-node
// Kubernetes built from source only as an admin installs it, from its image
// and deployments/ with kubectl, then upgraded, restarted and reconfigured
// under pod churn. One cluster serves the package; each test installs what it
// needs and uninstalls it, and checks that nothing was lost.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
)

// Two images of the same tree with other version stamps: an upgrade rolls
// from one to the other.
const (
	imageV1 = "ghcr.io/manifold-cni/manifold:cluster-v1"
	imageV2 = "ghcr.io/manifold-cni/manifold:cluster-v2"
)

var shared struct {
	once sync.Once
	mu   sync.Mutex
	c    *cluster.Cluster
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "cluster: %v: stopping the cluster\n", s)
		stopShared()
		crinode.StopAll()
		os.Exit(130)
	}()
	code := m.Run()
	if code != 0 {
		shared.mu.Lock()
		if shared.c != nil {
			fmt.Fprintf(os.Stderr, "cluster: logs:\n%s\n", shared.c.LogTails())
		}
		shared.mu.Unlock()
	}
	stopShared()
	os.Exit(code)
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		shared.c.Stop()
		shared.c = nil
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// theCluster returns the package's cluster, starting it on first use: the
// control plane, the node, the primary CNI's plugins, and manifold's two
// images imported. Without root or the binaries the test is skipped, unless
// MANIFOLD_REQUIRE_PRIVILEGED=1 makes that a failure.
func theCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	testenv.RequirePrivileged(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.c, shared.dir, shared.err = startCluster(ctx)
	})
	if shared.err != nil {
		if (errors.Is(shared.err, crinode.ErrBinariesUnavailable) || errors.Is(shared.err, controlplane.ErrBinariesUnavailable)) &&
			os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") != "1" {
			t.Skip(shared.err)
		}
		t.Fatal(shared.err)
	}
	return shared.c
}

func startCluster(ctx context.Context) (*cluster.Cluster, string, error) {
	dir, err := os.MkdirTemp("", "mfct-")
	if err != nil {
		return nil, "", err
	}
	runtime, err := cluster.RuntimeFromEnv()
	if err != nil {
		return nil, dir, err
	}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{TempDir: dir, Runtime: runtime})
	if err != nil {
		return nil, dir, err
	}
	fmt.Fprintf(os.Stderr, "cluster: control plane and node (%s) up in %s\n", runtime, time.Since(start).Round(time.Millisecond))
	if err := cluster.InstallPrimaryPlugins(); err != nil {
		return c, dir, err
	}
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return c, dir, err
	}
	for i, ref := range []string{imageV1, imageV2} {
		start := time.Now()
		res, err := ociimage.Build(ctx, ociimage.Options{Version: fmt.Sprintf("cluster-v%d", i+1), Ref: ref,
			OutPath: filepath.Join(dir, fmt.Sprintf("image-%d.tar", i+1)), RepoRoot: root})
		if err != nil {
			return c, dir, err
		}
		if err := c.Node.Import(ctx, res.Path); err != nil {
			return c, dir, err
		}
		fmt.Fprintf(os.Stderr, "cluster: image %s (%s) built and imported in %s\n", ref, res.Digest, time.Since(start).Round(time.Millisecond))
	}
	return c, dir, nil
}
