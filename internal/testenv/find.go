package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The functions here need no testing.T, so that programs (the demo) find the
// binaries the same way the tests do.

// FindRepoRoot returns the nearest directory at or above the working directory
// that holds a go.mod.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// FindPlugins returns the directory of CNI plugin binaries: $MANIFOLD_PLUGINS_DIR,
// or what hack/build-plugins.sh builds (cached by version, so only the first
// run is slow).
func FindPlugins() (string, error) {
	if d := os.Getenv("MANIFOLD_PLUGINS_DIR"); d != "" {
		return d, nil
	}
	root, err := FindRepoRoot()
	if err != nil {
		return "", err
	}
	out, err := run(root, "bash", "hack/build-plugins.sh")
	if err != nil {
		return "", fmt.Errorf("build CNI plugins: %w: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1], nil
}

// FindManifold returns the manifold binary: $MANIFOLD_BIN, or else a fresh
// build of ./cmd/manifold placed in dir.
func FindManifold(dir string) (string, error) {
	if b := os.Getenv("MANIFOLD_BIN"); b != "" {
		return b, nil
	}
	root, err := FindRepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "manifold")
	if out, err := run(root, "go", "build", "-o", bin, "./cmd/manifold"); err != nil {
		return "", fmt.Errorf("build manifold: %w: %s", err, out)
	}
	// `manifold daemon` runs the manifold-daemon next to it.
	if out, err := run(root, "go", "build", "-o", filepath.Join(dir, "manifold-daemon"), "./cmd/manifold-daemon"); err != nil {
		return "", fmt.Errorf("build manifold-daemon: %w: %s", err, out)
	}
	return bin, nil
}

// LinkBinDir fills dir, as a node's /opt/cni/bin, with links to every plugin in
// pluginsDir and to the manifold binary.
func LinkBinDir(dir, pluginsDir, manifold string) error {
	if err := LinkPlugins(dir, pluginsDir); err != nil {
		return err
	}
	return os.Symlink(manifold, filepath.Join(dir, "manifold"))
}

// LinkPlugins links every plugin in pluginsDir into dir.
func LinkPlugins(dir, pluginsDir string) error {
	entries, err := os.ReadDir(pluginsDir)
	if err != nil {
		return fmt.Errorf("read plugins dir: %w", err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			if err := os.Symlink(filepath.Join(pluginsDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
