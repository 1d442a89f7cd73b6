package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
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

// DynnetControllerImage is the image the controller's manifest names;
// ImportDynnetController puts one under that name on the node, so that the
// manifest applies as it is and nothing is pulled.
const DynnetControllerImage = "ghcr.io/k8snetworkplumbingwg/multus-dynamic-networks-controller:latest-amd64"

// ImportDynnetController packs the controller's binary (built outside this
// repository, DynnetControllerEnv) with ociimage where its manifest runs it,
// /dynamic-networks-controller, beside a stand-in for the curl its probes
// run (e2e/crinode/images/curl), and imports the image into the node's
// runtime.
func (c *Cluster) ImportDynnetController(ctx context.Context, controller string) error {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(c.Dir, "dynnet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	curl := filepath.Join(dir, "curl")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", curl, "./e2e/crinode/images/curl")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the curl stand-in: %w: %s", err, out)
	}
	res, err := ociimage.Write(filepath.Join(dir, "controller.tar"), ociimage.Spec{Ref: DynnetControllerImage,
		Entrypoint: []string{"/dynamic-networks-controller"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []ociimage.File{{Path: "/dynamic-networks-controller", Mode: 0o755, Source: controller},
			{Path: "/usr/bin/curl", Mode: 0o755, Source: curl}}})
	if err != nil {
		return err
	}
	if err := c.Node.Import(ctx, res.Path); err != nil {
		return fmt.Errorf("import %s: %w", DynnetControllerImage, err)
	}
	return nil
}

// The controller's manifests give the runtime's socket at its usual host
// path; this node's runtime listens in the cluster's dir.
var criSocketHostPaths = map[string]string{Containerd: "/run/containerd/containerd.sock", CRIO: "/run/crio/crio.sock"}

// DynnetManifest is the controller's manifest for this node's runtime, as
// an admin applies it here: manifest for containerd, the crio- one beside
// it for CRI-O, with one edit, the host path of the runtime's socket (the
// path in the container, which its config names, stays). The result is a
// JSON List for kubectl.
func (c *Cluster) DynnetManifest(manifest string) ([]byte, error) {
	if c.Node.Kind() == CRIO {
		manifest = filepath.Join(filepath.Dir(manifest), "crio-"+filepath.Base(manifest))
	}
	b, err := os.ReadFile(manifest)
	if err != nil {
		return nil, err
	}
	var objs []any
	edited := 0
	for _, doc := range yamlSeparator.Split(string(b), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", manifest, err)
		}
		if obj == nil {
			continue
		}
		volumes, _ := dig(obj, "spec", "template", "spec", "volumes").([]any)
		for _, v := range volumes {
			hp, _ := dig(v, "hostPath").(map[string]any)
			if hp != nil && hp["path"] == criSocketHostPaths[c.Node.Kind()] {
				hp["path"] = c.Node.CRIClient().Socket
				edited++
			}
		}
		objs = append(objs, obj)
	}
	if edited != 1 {
		return nil, fmt.Errorf("%s: %d host paths of %s's socket (%s), want 1", manifest, edited, c.Node.Kind(), criSocketHostPaths[c.Node.Kind()])
	}
	return json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
}

// ApplyThickWithDaemonArgs applies the thick DaemonSet (Manifest) with
// image and daemonArgs added to its daemon's, as an admin edits them, and
// waits for its rollout.
func (c *Cluster) ApplyThickWithDaemonArgs(ctx context.Context, image string, daemonArgs ...string) error {
	m, err := c.Manifest(Thick.File, image)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(m, &obj); err != nil {
		return err
	}
	containers, _ := dig(obj, "spec", "template", "spec", "containers").([]any)
	found := false
	for _, ci := range containers {
		if ctr, _ := ci.(map[string]any); ctr["name"] == "daemon" {
			args, _ := ctr["args"].([]any)
			for _, a := range daemonArgs {
				args = append(args, a)
			}
			ctr["args"], found = args, true
		}
	}
	if !found {
		return fmt.Errorf("%s has no container named daemon", Thick.File)
	}
	if m, err = json.Marshal(obj); err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, string(m), "apply", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply %s with the daemon's %q: %w: %s", Thick.File, daemonArgs, err, out)
	}
	_, err = c.Run(ctx, rolloutStep(Thick), image)
	return err
}
