package crinode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
)

// ImageRef is the one image the node uses, for sandboxes and containers
// alike. It is imported, pinned as the sandbox image, and never pulled.
const ImageRef = "manifold.test/node-tools:1"

// Programs in the image: Pause holds a sandbox, NetTool listens and connects
// (e2e/crinode/images).
const (
	Pause   = "/pause"
	NetTool = "/nettool"
)

// BuildImage builds the image's static Go programs and packs them with
// ociimage, named ImageRef, for `ctr images import`. It returns the tarball's
// path, in dir.
func BuildImage(ctx context.Context, dir string) (string, error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return "", err
	}
	var files []ociimage.File
	for _, prog := range []string{Pause, NetTool} {
		out := filepath.Join(dir, filepath.Base(prog))
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./e2e/crinode/images"+prog)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w: %s", prog, err, b)
		}
		files = append(files, ociimage.File{Path: prog, Mode: 0o755, Source: out})
	}
	res, err := ociimage.Write(filepath.Join(dir, "image.tar"), ociimage.Spec{Ref: ImageRef, Entrypoint: []string{Pause}, Files: files})
	if err != nil {
		return "", err
	}
	return res.Path, nil
}
