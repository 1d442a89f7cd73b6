package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The multus-dynamic-networks-controller's own e2e suite (its e2e/ package, a
// Ginkgo suite), run unchanged against this cluster. Its module cannot be
// fetched through the Go module proxy, and no code of it is kept in this
// repository: the suite's test binary, the controller's binary and its
// manifest are built and fetched outside it, and named by these variables
// (docs/hotplug.md, "Tests", says how). Without them the tests that need them are
// skipped: an artifact is missing, not a privilege.
const (
	// DynnetE2EEnv names the suite's test binary (`go test -c ./e2e` in the
	// controller's module).
	DynnetE2EEnv = "MANIFOLD_DYNNET_E2E"
	// DynnetControllerEnv names the controller's binary (`go build
	// ./cmd/dynamic-networks-controller`, static).
	DynnetControllerEnv = "MANIFOLD_DYNNET_CONTROLLER"
	// DynnetManifestEnv names its manifest for containerd
	// (manifests/dynamic-networks-controller.yaml); the one for CRI-O,
	// crio-dynamic-networks-controller.yaml, is looked for beside it.
	DynnetManifestEnv = "MANIFOLD_DYNNET_MANIFEST"
)

// DynnetSpec is one spec of the suite as its JSON report gives it.
type DynnetSpec struct {
	// Name is the spec's containers' texts and its own, joined by " / ".
	Name string
	// State is Ginkgo's: passed, failed, skipped, pending, ...
	State string
	// FailedIn is the kind of node that failed (BeforeEach, It, ...), and
	// Failure its message, for a spec that did not pass.
	FailedIn, Failure string
}

// ginkgoReport is what DynnetSpec reads of Ginkgo's --json-report.
type ginkgoReport []struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		Failure                 struct {
			Message         string
			FailureNodeType string
		}
	}
}

// RunDynnetSuite runs the suite's test binary with KUBECONFIG set to the
// cluster's admin kubeconfig and env added, in dir, and returns its specs
// (the It nodes of its report) and its output. An error means the suite
// could not be run or gave no report; failed specs are in the result.
func (c *Cluster) RunDynnetSuite(ctx context.Context, bin, dir string, env ...string) ([]DynnetSpec, string, error) {
	report := filepath.Join(dir, "dynnet-report.json")
	cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.timeout=30m", "-ginkgo.no-color", "-ginkgo.v",
		"-ginkgo.json-report="+report)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+c.CP.KubeconfigPath), env...)
	out, runErr := cmd.CombinedOutput()
	b, err := os.ReadFile(report)
	if err != nil {
		return nil, string(out), fmt.Errorf("run %s: %v; no report: %w", bin, runErr, err)
	}
	var r ginkgoReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, string(out), fmt.Errorf("decode %s: %w", report, err)
	}
	var specs []DynnetSpec
	for _, suite := range r {
		for _, s := range suite.SpecReports {
			if s.LeafNodeType != "It" {
				continue // the suite's set-up nodes, reported beside the specs
			}
			specs = append(specs, DynnetSpec{Name: strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " / "),
				State: s.State, FailedIn: s.Failure.FailureNodeType, Failure: s.Failure.Message})
		}
	}
	if len(specs) == 0 {
		return nil, string(out), fmt.Errorf("run %s: %v; its report lists no spec", bin, runErr)
	}
	return specs, string(out), nil
}
