package controlplane

import (
	"context"
	"os"
	"testing"
	"time"
)

// EnvRequirePrivileged, set to "1" (as CI does), turns every skip for a
// missing privilege or missing binary into a failure (DESIGN §9).
const EnvRequirePrivileged = "MANIFOLD_REQUIRE_PRIVILEGED"

// StartForTest starts a control plane with opts for t and registers Stop with
// t.Cleanup, so the servers and the scratch directory go away however the
// test ends. It skips the test when not running as root or when the binaries
// cannot be found or built, unless MANIFOLD_REQUIRE_PRIVILEGED=1, where those
// are fatal. A start failure with the binaries present is always fatal. When
// the test has failed, the servers' log tails are logged before cleanup.
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv(EnvRequirePrivileged) == "1" {
			t.Fatalf(format+" ("+EnvRequirePrivileged+"=1 forbids skipping)", args...)
		}
		t.Skipf(format, args...)
	}
	if os.Geteuid() != 0 {
		skip("e2e control plane needs root")
	}
	// A cold build of the binaries takes many minutes (see
	// hack/build-control-plane.sh), so give it room; a warm lookup is
	// instant.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	bins, err := FindBinaries(ctx)
	if err != nil {
		skip("e2e control plane binaries: %v", err)
	}
	opts.Binaries = bins
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs from %s:\n%s", cp.Dir, cp.LogTails())
		}
		cp.Stop()
	})
	return cp
}
