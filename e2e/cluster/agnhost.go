package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
)

// AgnhostImage is the image that the multus-dynamic-networks-controller's e2e
// pods run (its e2e/client podSpec), with the pull policy a tag gives:
// IfNotPresent. ImportAgnhost puts a stand-in under that very name on the
// node, so the kubelet finds it there and pulls nothing.
const AgnhostImage = "k8s.gcr.io/e2e-test-images/agnhost:2.26"

// agnhostShell is the one program of the stand-in, where the pods' command
// looks for it (e2e/crinode/images/ash).
const agnhostShell = "/bin/ash"

var agnhostOnce struct {
	sync.Mutex
	done map[*Cluster]bool
}

// ImportAgnhost builds the stand-in for AgnhostImage (a static Go /bin/ash
// that runs the pods' one command, packed by ociimage as the node's own
// image is) and imports it into the node's runtime, once per cluster.
func (c *Cluster) ImportAgnhost(ctx context.Context) error {
	agnhostOnce.Lock()
	defer agnhostOnce.Unlock()
	if agnhostOnce.done[c] {
		return nil
	}
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(c.Dir, "agnhost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ash")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./e2e/crinode/images/ash")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the agnhost stand-in: %w: %s", err, out)
	}
	res, err := ociimage.Write(filepath.Join(dir, "agnhost.tar"), ociimage.Spec{Ref: AgnhostImage,
		Entrypoint: []string{agnhostShell}, Files: []ociimage.File{{Path: agnhostShell, Mode: 0o755, Source: bin}}})
	if err != nil {
		return err
	}
	if err := c.Node.Import(ctx, res.Path); err != nil {
		return fmt.Errorf("import %s: %w", AgnhostImage, err)
	}
	if agnhostOnce.done == nil {
		agnhostOnce.done = map[*Cluster]bool{}
	}
	agnhostOnce.done[c] = true
	return nil
}
