package k8sclient

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPluginLinksNoClientGo keeps client-go and apimachinery out of the plugin
// binary: their package initialisation made every ADD and DEL start several
// milliseconds later (docs/performance.md), and they creep back in easily
// through one convenient import.
func TestPluginLinksNoClientGo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("no go command, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping")
		}
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/manifold-cni/manifold/cmd/manifold").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") {
			t.Errorf("cmd/manifold depends on %s", pkg)
		}
	}
}
