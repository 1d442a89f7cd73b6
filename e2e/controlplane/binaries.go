package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// Environment variables that point at prebuilt binaries. When both are set the
// build script is not run at all.
const (
	EnvKubeAPIServer = "MANIFOLD_KUBE_APISERVER"
	EnvEtcd          = "MANIFOLD_ETCD"
)

// buildScript is the repository-relative path of the script that builds and
// caches the two servers (DESIGN §9).
const buildScript = "hack/build-control-plane.sh"

// ErrBinariesUnavailable is wrapped by FindBinaries when kube-apiserver or etcd
// cannot be located or built. StartForTest skips on it; any other Start error
// is a real failure.
var ErrBinariesUnavailable = errors.New("control plane binaries unavailable")

// Binaries holds the paths of the two server executables.
type Binaries struct {
	KubeAPIServer string
	Etcd          string
}

// FindBinaries locates kube-apiserver and etcd: from EnvKubeAPIServer and
// EnvEtcd when set, otherwise by running hack/build-control-plane.sh from the
// repository root (found by walking up from the working directory to go.mod).
// The script returns at once when its cache is warm; a cold build takes about
// ten minutes and honours ctx.
func FindBinaries(ctx context.Context) (Binaries, error) {
	b := Binaries{KubeAPIServer: os.Getenv(EnvKubeAPIServer), Etcd: os.Getenv(EnvEtcd)}
	if b.KubeAPIServer == "" || b.Etcd == "" {
		built, err := runBuildScript(ctx)
		if err != nil {
			return Binaries{}, err
		}
		if b.KubeAPIServer == "" {
			b.KubeAPIServer = built.KubeAPIServer
		}
		if b.Etcd == "" {
			b.Etcd = built.Etcd
		}
	}
	for _, p := range []string{b.KubeAPIServer, b.Etcd} {
		if err := checkExecutable(p); err != nil {
			return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
		}
	}
	return b, nil
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat server binary: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("server binary %s is not executable", path)
	}
	return nil
}

// RepoRoot returns the nearest directory at or above the working directory
// that holds a go.mod, so tests find repository files from any package.
func RepoRoot() (string, error) { return testenv.FindRepoRoot() }

func runBuildScript(ctx context.Context) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
	}
	script := filepath.Join(root, buildScript)
	if _, err := os.Stat(script); err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
	}
	// Parallel test packages each call FindBinaries; the script has no locking
	// of its own, so serialise it to avoid two cold builds fighting over the
	// same cache files on a small machine.
	unlock, err := lockFile(ctx, filepath.Join(os.TempDir(), "manifold-control-plane-build.lock"))
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
	}
	defer unlock()

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = root
	cmd.Stdout = &stdout
	// A cold build is silent for minutes; echo its progress lines so a person
	// watching `go test -v` knows why it is slow.
	cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("%w: run %s: %w: %s", ErrBinariesUnavailable, buildScript, err, tail(stderr.Bytes(), 2048))
	}
	lines := strings.Fields(strings.TrimSpace(stdout.String()))
	if len(lines) != 2 {
		return Binaries{}, fmt.Errorf("%w: %s printed %q, want two paths", ErrBinariesUnavailable, buildScript, stdout.String())
	}
	return Binaries{KubeAPIServer: lines[0], Etcd: lines[1]}, nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for build lock %s: %w", path, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
