package podresources_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPluginsLinkNoGRPC keeps gRPC, and the kubelet's API with it, out of the
// binaries that the runtime runs for every CNI call: manifold-shim, whose
// point is to start fast and small, and the manifold plugin, whose start-up
// gRPC's package initialisation made about 3 ms slower. Only manifold-daemon
// talks to the kubelet; the plugin runs it for a pod that draws a device
// (docs/devices.md).
func TestPluginsLinkNoGRPC(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("no go command, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping")
		}
		t.Skip("no go command")
	}
	for _, cmd := range []string{"cmd/manifold-shim", "cmd/manifold"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/manifold-cni/manifold/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.HasPrefix(pkg, "google.golang.org/") || strings.HasPrefix(pkg, "k8s.io/kubelet") || strings.HasPrefix(pkg, "github.com/prometheus/") {
				t.Errorf("%s depends on %s", cmd, pkg)
			}
		}
	}
}
