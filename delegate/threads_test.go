package delegate

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// lockAudit holds every package outside the standard library linked into
// manifold's binaries that calls runtime.LockOSThread (the standard library
// calls it on Linux only in the runtime, which never returns locked), with
// the number of calls, each read for one thing: no
// goroutine returns with its thread locked. The Go runtime ends the thread of
// a goroutine that does, and the kernel then kills every delegate forked on
// that thread (TestThreadEndKillsItsDelegates), since spawn forks on any
// thread.
var lockAudit = map[string]int{
	// main's goroutine, locked in init; it never returns (the process
	// exits).
	"github.com/manifold-cni/manifold/cmd/manifold":        1,
	"github.com/manifold-cni/manifold/cmd/manifold-daemon": 1,
	// spawn (unlocked after the fork) and inNetNS (unlocked, or kept for
	// good when the thread cannot go back).
	"github.com/manifold-cni/manifold/delegate": 2,
	// getCurrentNS: unlocked by a defer.
	"github.com/containernetworking/cni/pkg/ns": 1,
	// GetNetlinkSocketAt: unlocked on every return (restore).
	"github.com/vishvananda/netlink/nl": 1,
}

// TestLinkedCodeEndsNoThread fails when a package linked into manifold,
// manifold-daemon or manifold-shim calls runtime.LockOSThread other than as
// lockAudit records: a new dependency, a new version of one, or our own code.
// Read the new calls; if no goroutine can return with its thread locked,
// record them in lockAudit. If one can (netns helpers often end a thread
// they could not move back), use inNetNS or keep the thread as it does.
func TestLinkedCodeEndsNoThread(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("no go command, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping")
		}
		t.Skip("no go command")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}}{{end}}",
		"github.com/manifold-cni/manifold/cmd/manifold", "github.com/manifold-cni/manifold/cmd/manifold-daemon", "github.com/manifold-cni/manifold/cmd/manifold-shim")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	found := map[string]int{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) != 3 {
			continue
		}
		for _, name := range strings.Fields(f[2]) {
			src, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(src, []byte("LockOSThread()")); n > 0 {
				found[f[0]] += n
			}
		}
	}
	if len(found) == 0 {
		t.Fatal("no package calls LockOSThread, not even spawn: the scan is broken")
	}
	for pkg, n := range found {
		if lockAudit[pkg] != n {
			t.Errorf("%s calls runtime.LockOSThread %d times, lockAudit has %d: read them (see the test's comment)", pkg, n, lockAudit[pkg])
		}
	}
	for pkg, n := range lockAudit {
		if found[pkg] == 0 {
			t.Errorf("lockAudit has %d calls in %s, which is no longer linked or calls it no more", n, pkg)
		}
	}
}
