package crinode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
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

// BuildImage builds the image's static Go programs and packs them as an OCI
// image-layout tar in dir, named ImageRef, for `ctr images import`. It returns
// the tar's path.
func BuildImage(ctx context.Context, dir string) (string, error) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	for _, prog := range []string{"pause", "nettool"} {
		out := filepath.Join(dir, prog)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./e2e/crinode/images/"+prog)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w: %s", prog, err, b)
		}
		if files[prog], err = os.ReadFile(out); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "image.tar")
	return path, writeLayout(path, files)
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func describe(mediaType string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)}
}

// writeLayout writes the OCI image layout (oci-layout, index.json and the
// blobs: one uncompressed layer with the files at /, the config, the
// manifest) as a tar.
func writeLayout(path string, files map[string][]byte) error {
	mtime := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, name := range []string{"nettool", "pause"} {
		if err := lw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(files[name])), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := lw.Write(files[name]); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerDesc := describe("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{Pause}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := describe("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := describe("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ImageRef,
		"org.opencontainers.image.ref.name": "1",
	}
	// ctr unpacks only for a platform it is told, or one the index names.
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifestDesc},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	add := func(name string, b []byte) error {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := w.Write(b)
		return err
	}
	blob := func(d descriptor) string { return "blobs/sha256/" + d.Digest[len("sha256:"):] }
	for _, e := range []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(layerDesc), layer.Bytes()},
		{blob(configDesc), config},
		{blob(manifestDesc), manifest},
	} {
		if err := add(e.name, e.b); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
