// Package testenv gives tests the real things they run against: root, the CNI
// plugin binaries, the manifold binary, and network namespaces that are removed
// when the test ends, pass or fail.
package testenv

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// RequirePrivileged skips a test that needs root, unless MANIFOLD_REQUIRE_PRIVILEGED=1
// (CI sets it), where the skip becomes a failure so it cannot pass unseen.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("this test needs root, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping it")
	}
	t.Skip("needs root (set MANIFOLD_REQUIRE_PRIVILEGED=1 to make this a failure)")
}

// RepoRoot is the directory that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	pluginsOnce sync.Once
	pluginsDir  string
	pluginsErr  error
)

// Plugins returns the directory of CNI plugin binaries: $MANIFOLD_PLUGINS_DIR, or
// what hack/build-plugins.sh builds (cached, so only the first run is slow).
func Plugins(t testing.TB) string {
	t.Helper()
	pluginsOnce.Do(func() { pluginsDir, pluginsErr = FindPlugins() })
	if pluginsErr != nil {
		t.Fatal(pluginsErr)
	}
	return pluginsDir
}

// Manifold returns the path of the manifold binary: $MANIFOLD_BIN (make test sets
// it), or else a fresh build in the test's temp dir.
func Manifold(t testing.TB) string {
	t.Helper()
	bin, err := FindManifold(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BinDir returns a directory holding manifold and every plugin, as a node's
// /opt/cni/bin would.
func BinDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := LinkBinDir(dir, Plugins(t), Manifold(t)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

// NetNS creates a network namespace that is closed and unmounted when the test
// ends.
func NetNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// FreeLoopbackAddr is a 127.0.0.1 address with a port that was free a moment
// ago, for a server that the test starts in another process.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
