package podresources_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShimLinksNoGRPC keeps gRPC out of manifold-shim, thick mode's small CNI
// binary, whose point is to start fast and small: only the plugin and the
// daemon talk to the kubelet.
func TestShimLinksNoGRPC(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/manifold-cni/manifold/cmd/manifold-shim").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "google.golang.org/") || strings.HasPrefix(pkg, "k8s.io/kubelet") {
			t.Errorf("cmd/manifold-shim depends on %s", pkg)
		}
	}
}
