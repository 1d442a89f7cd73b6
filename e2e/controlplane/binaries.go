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

	"github.com/manifold-cni/manifold/internal/testenv"
)

// Environment variables that point at prebuilt binaries. When all of them
// are set the build script is not run at all.
const (
	EnvKubeAPIServer         = "MANIFOLD_KUBE_APISERVER"
	EnvEtcd                  = "MANIFOLD_ETCD"
	EnvKubeScheduler         = "MANIFOLD_KUBE_SCHEDULER"
	EnvKubeControllerManager = "MANIFOLD_KUBE_CONTROLLER_MANAGER"
	EnvKubectl               = "MANIFOLD_KUBECTL"
)

// buildScript is the repository-relative path of the script that builds and
// caches the control plane's programs (DESIGN §9).
const buildScript = "hack/build-control-plane.sh"

// ErrBinariesUnavailable is wrapped by FindBinaries when a program cannot be
// located or built. StartForTest skips on it; any other Start error is a real
// failure.
var ErrBinariesUnavailable = errors.New("control plane binaries unavailable")

// Binaries holds the paths of the control plane's executables, all built from
// one Kubernetes version (etcd aside).
type Binaries struct {
	KubeAPIServer string
	Etcd          string
	// KubeScheduler and KubeControllerManager are needed only with
	// Options.Controllers.
	KubeScheduler         string
	KubeControllerManager string
	// Kubectl is needed only by ControlPlane.Kubectl.
	Kubectl string
}

// binaryField is one program: the variable that names it and its path.
type binaryField struct {
	env  string
	path *string
}

// fields lists the programs in the order the build script prints them.
func (b *Binaries) fields() []binaryField {
	return []binaryField{
		{EnvKubeAPIServer, &b.KubeAPIServer},
		{EnvEtcd, &b.Etcd},
		{EnvKubeScheduler, &b.KubeScheduler},
		{EnvKubeControllerManager, &b.KubeControllerManager},
		{EnvKubectl, &b.Kubectl},
	}
}

// complete reports whether every program Start needs for opts has a path.
func (b Binaries) complete(controllers bool) bool {
	if b.KubeAPIServer == "" || b.Etcd == "" {
		return false
	}
	return !controllers || (b.KubeScheduler != "" && b.KubeControllerManager != "")
}

// FindBinaries locates the control plane's programs: each from its variable
// (EnvKubeAPIServer, EnvEtcd, EnvKubeScheduler, EnvKubeControllerManager,
// EnvKubectl) when set, the rest by running hack/build-control-plane.sh from
// the repository root (found by walking up from the working directory to
// go.mod). The script returns at once when its cache is warm; a cold build
// takes many minutes and honours ctx.
func FindBinaries(ctx context.Context) (Binaries, error) {
	var b Binaries
	missing := false
	for _, f := range b.fields() {
		*f.path = os.Getenv(f.env)
		missing = missing || *f.path == ""
	}
	if missing {
		built, err := runBuildScript(ctx)
		if err != nil {
			return Binaries{}, err
		}
		builtFields := built.fields()
		for i, f := range b.fields() {
			if *f.path == "" {
				*f.path = *builtFields[i].path
			}
		}
	}
	for _, f := range b.fields() {
		if err := checkExecutable(*f.path); err != nil {
			return Binaries{}, fmt.Errorf("%w: %s: %w", ErrBinariesUnavailable, f.env, err)
		}
	}
	return b, nil
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat binary: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("binary %s is not executable", path)
	}
	return nil
}

// RepoRoot returns the nearest directory at or above the working directory
// that holds a go.mod, so tests find repository files from any package.
func RepoRoot() (string, error) { return testenv.FindRepoRoot() }

// runBuildScript runs the build script, which holds a lock in its cache dir
// while it builds, so that the test packages that call it at once wait for
// one build instead of fighting over the same files.
func runBuildScript(ctx context.Context) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
	}
	script := filepath.Join(root, buildScript)
	if _, err := os.Stat(script); err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrBinariesUnavailable, err)
	}
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
	var b Binaries
	lines := strings.Fields(strings.TrimSpace(stdout.String()))
	fields := b.fields()
	if len(lines) != len(fields) {
		return Binaries{}, fmt.Errorf("%w: %s printed %q, want %d paths", ErrBinariesUnavailable, buildScript, stdout.String(), len(fields))
	}
	for i, f := range fields {
		*f.path = lines[i]
	}
	return b, nil
}
