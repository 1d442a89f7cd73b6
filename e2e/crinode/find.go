package crinode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// onPath finds a program that a Debian package puts on PATH.
func onPath(name, pkg string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not on PATH (apt-get install -y %s)", ErrBinariesUnavailable, name, pkg)
	}
	return p, nil
}

// hackBuild runs hack/<script> from the repository, which builds what it
// names (cached by version; a cold build takes minutes and shows its
// progress on stderr) and prints one path per line, want of them.
func hackBuild(script string, want int) ([]string, error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", script))
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: hack/%s: %v", ErrBinariesUnavailable, script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != want {
		return nil, fmt.Errorf("%w: hack/%s printed %q, want %d lines", ErrBinariesUnavailable, script, out, want)
	}
	return lines, nil
}

// executables checks that every path that is not empty is an executable file.
func executables(paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: %s is not an executable", ErrBinariesUnavailable, p)
		}
	}
	return nil
}
