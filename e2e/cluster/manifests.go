package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// Mode is how manifold runs on the node: one DaemonSet of deployments/ each.
type Mode struct {
	// File is the DaemonSet's manifest in deployments/.
	File string
	// DaemonSet is its name, in kube-system.
	DaemonSet string
	// Thick runs manifold-shim and the node daemon.
	Thick bool
}

// The two ways to install manifold, as docs/install.md gives them.
var (
	Thin  = Mode{File: "daemonset.yaml", DaemonSet: "manifold"}
	Thick = Mode{File: "daemonset-thick.yaml", DaemonSet: "manifold-thick", Thick: true}
)

func (m Mode) String() string {
	if m.Thick {
		return "thick"
	}
	return "thin"
}

// ManifoldNetwork is the name of the conflist the installer writes (its
// --network-name default); containerd's libcni cache names its entries
// after it.
const ManifoldNetwork = "manifold-cni-network"

// ManifoldConfig is the config the installer writes, on the host.
var ManifoldConfig = filepath.Join(ConfDir, "00-manifold.conflist")

// placeholderImage is the image deployments/ names, for the admin to replace.
const placeholderImage = "ghcr.io/manifold-cni/manifold:latest"

// Manifest is deployments/<file> as an admin applies it to this cluster: the
// image reference replaced, and the installer given --api-server, because
// there is no kube-proxy here to make the kubernetes Service reachable from
// the host network, then installerArgs (an admin's own flags, as
// docs/install.md lists them). Nothing else changes; the result is JSON (a
// List when the file holds several objects), which kubectl applies like the
// YAML.
func (c *Cluster) Manifest(file, image string, installerArgs ...string) ([]byte, error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, "deployments", file))
	if err != nil {
		return nil, err
	}
	return manifest(b, image, c.CP.URL, installerArgs)
}

// yamlSeparator is the line between two documents of a YAML stream.
var yamlSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// manifest is the edit that Manifest makes, to every object of the file.
func manifest(yamlDoc []byte, image, apiServer string, installerArgs []string) ([]byte, error) {
	var objs []any
	replaced := 0
	for _, doc := range yamlSeparator.Split(string(yamlDoc), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, err
		}
		if obj == nil {
			continue // only comments
		}
		replaced += editPodTemplate(obj, image, apiServer, installerArgs)
		objs = append(objs, obj)
	}
	if replaced == 0 {
		return nil, fmt.Errorf("no container of the manifest has the image %s to replace", placeholderImage)
	}
	if len(objs) == 1 {
		return json.Marshal(objs[0])
	}
	return json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
}

// editPodTemplate sets image in the containers of obj's pod template that
// name the placeholder, and gives the installer --api-server and
// installerArgs. It returns how
// many images it replaced.
func editPodTemplate(obj map[string]any, image, apiServer string, installerArgs []string) int {
	spec, _ := dig(obj, "spec", "template", "spec").(map[string]any)
	containers, _ := spec["containers"].([]any)
	replaced := 0
	for _, ci := range containers {
		ctr, _ := ci.(map[string]any)
		if ctr["image"] == placeholderImage {
			ctr["image"] = image
			replaced++
		}
		if ctr["name"] == "install" {
			args, _ := ctr["args"].([]any)
			args = append(args, "--api-server="+apiServer)
			for _, a := range installerArgs {
				args = append(args, a)
			}
			ctr["args"] = args
		}
	}
	return replaced
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// Step is one kubectl command of docs/install.md, as an admin types it
// there. Apply, when set, is the deployments/ file whose edited copy
// (Manifest) is applied instead of the file itself, with InstallerArgs added
// to its installer's.
type Step struct {
	Args          []string
	Apply         string
	InstallerArgs []string
}

// String is the command as docs/install.md writes it.
func (s Step) String() string { return "kubectl " + strings.Join(s.Args, " ") }

func applyStep(file string, edited bool) Step {
	s := Step{Args: []string{"apply", "-f", "deployments/" + file}}
	if edited {
		s.Apply = file
	}
	return s
}

func rolloutStep(m Mode) Step {
	return Step{Args: []string{"-n", "kube-system", "rollout", "status", "ds/" + m.DaemonSet}}
}

// InstallSteps install manifold in mode on a cluster, as docs/install.md
// says: the CRD, the RBAC, the DaemonSet, and the wait for its rollout.
func InstallSteps(m Mode) []Step {
	return []Step{applyStep("crd.yaml", false), applyStep("rbac.yaml", false), applyStep(m.File, true), rolloutStep(m)}
}

// SwitchSteps move a cluster from one mode to the other, as docs/install.md
// says: the other DaemonSet, the wait for its rollout, then the first one
// deleted.
func SwitchSteps(from, to Mode) []Step {
	return []Step{applyStep(to.File, true), rolloutStep(to), {Args: []string{"delete", "-f", "deployments/" + from.File}}}
}

// Run runs a step with kubectl from the repository root, with image in the
// DaemonSet it applies, and returns kubectl's output.
func (c *Cluster) Run(ctx context.Context, s Step, image string) (string, error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return "", err
	}
	args, stdin := s.Args, ""
	if s.Apply != "" {
		m, err := c.Manifest(s.Apply, image, s.InstallerArgs...)
		if err != nil {
			return "", err
		}
		args, stdin = []string{"apply", "-f", "-"}, string(m)
	} else {
		for i, a := range args {
			if strings.HasPrefix(a, "deployments/") {
				args = append(append([]string{}, args[:i]...), append([]string{filepath.Join(root, a)}, args[i+1:]...)...)
			}
		}
	}
	if args[0] == "-n" && args[2] == "rollout" {
		args = append(append([]string{}, args...), "--timeout=4m")
	}
	out, err := c.Kubectl(ctx, stdin, args...)
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", s, err, out)
	}
	return out, nil
}

// runSteps runs the steps in order.
func (c *Cluster) runSteps(ctx context.Context, steps []Step, image string) error {
	for _, s := range steps {
		if _, err := c.Run(ctx, s, image); err != nil {
			return err
		}
	}
	return nil
}

// Install installs manifold in mode with image (InstallSteps), its
// installer given installerArgs too.
func (c *Cluster) Install(ctx context.Context, mode Mode, image string, installerArgs ...string) error {
	steps := InstallSteps(mode)
	for i := range steps {
		if steps[i].Apply != "" {
			steps[i].InstallerArgs = installerArgs
		}
	}
	return c.runSteps(ctx, steps, image)
}

// Roll applies the DaemonSet of mode with image (an upgrade) and waits for
// its rollout on the node.
func (c *Cluster) Roll(ctx context.Context, mode Mode, image string) error {
	return c.runSteps(ctx, []Step{applyStep(mode.File, true), rolloutStep(mode)}, image)
}

// Switch moves the node from one mode to the other with image
// (SwitchSteps).
func (c *Cluster) Switch(ctx context.Context, from, to Mode, image string) error {
	if err := c.runSteps(ctx, SwitchSteps(from, to), image); err != nil {
		return err
	}
	return c.waitNoPods(ctx, "app.kubernetes.io/name="+from.DaemonSet)
}

// Uninstall deletes the DaemonSet of mode and waits until its pods are gone:
// with --cleanup-config-on-exit, the last installer removes manifold's
// config.
func (c *Cluster) Uninstall(ctx context.Context, mode Mode) error {
	out, err := c.Kubectl(ctx, "", "-n", "kube-system", "delete", "ds", mode.DaemonSet, "--wait=true", "--timeout=2m")
	if err != nil && !strings.Contains(out+err.Error(), "NotFound") {
		return fmt.Errorf("kubectl delete ds %s: %w: %s", mode.DaemonSet, err, out)
	}
	return c.waitNoPods(ctx, "app.kubernetes.io/name="+mode.DaemonSet)
}

// waitNoPods waits until kube-system has no pod with the label selector.
func (c *Cluster) waitNoPods(ctx context.Context, selector string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := c.Clientset().CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pods %s still there after 2m (%v)", selector, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
