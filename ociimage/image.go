// Package ociimage packs files into a container image tarball without Docker:
// manifold's own image for `make image` (manifold.go), and the test images of
// the runtime tier (e2e/crinode).
//
// The tarball is an OCI image layout (oci-layout, index.json, blobs/sha256/)
// that also carries Docker's manifest.json pointing at the same blobs, as
// `docker save` of Docker 25 and later writes it. `ctr images import` reads
// the layout, `docker load` reads manifest.json, and `podman load` reads it
// as an oci-archive. The same files give the same bytes, and so the same
// digest: entries are sorted, owners and mtimes fixed, the config's dates are
// the Unix epoch, and the layer is gzipped by the standard library, whose
// output depends only on its input (for one Go release).
package ociimage

import (
	"compress/gzip"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one regular file of the image.
type File struct {
	// Path is where the file is in the image: absolute and clean.
	Path string
	// Mode holds the permission bits.
	Mode os.FileMode
	// Source is the file on this machine whose content is copied.
	Source string
}

// Spec is an image to write: one layer holding Files (and their parent
// directories), and the config that runs it.
type Spec struct {
	// Ref names the image, with its registry and tag
	// ("ghcr.io/manifold-cni/manifold:v1.2.0"): it is what the runtimes list
	// after the import, and what a pod spec names.
	Ref string
	// OS and Arch are the image's platform; empty means linux and the
	// architecture this program runs on.
	OS, Arch   string
	Entrypoint []string
	Env        []string
	Files      []File
}

// Result is a written image.
type Result struct {
	// Path is the tarball.
	Path string
	// Ref is the image's name in it.
	Ref string
	// Digest is the manifest's digest: the image digest that `ctr images ls`
	// shows and the kubelet reports as a pod's imageID.
	Digest v1.Hash
	// ID is the config's digest: the image ID of `docker images` and the CRI.
	ID v1.Hash
}

// epoch is every date in the image: files, config, history.
var epoch = time.Unix(0, 0).UTC()

// Write packs s into a tarball at path, replacing it atomically: on error
// path is left as it was.
func Write(path string, s Spec) (Result, error) {
	if err := s.validate(); err != nil {
		return Result{}, err
	}
	if s.OS == "" {
		s.OS = "linux"
	}
	if s.Arch == "" {
		s.Arch = runtime.GOARCH
	}
	dir := filepath.Dir(path)
	layerTar, err := os.CreateTemp(dir, "."+filepath.Base(path)+".layer-*")
	if err != nil {
		return Result{}, fmt.Errorf("create the layer's temp file: %w", err)
	}
	defer os.Remove(layerTar.Name())
	err = writeLayerTar(layerTar, s.Files)
	if cerr := layerTar.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("image %s: write its layer: %w", s.Ref, err)
	}
	img, err := s.image(layerTar.Name())
	if err != nil {
		return Result{}, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	res := Result{Path: path, Ref: s.Ref}
	if res.Digest, err = img.Digest(); err != nil {
		return Result{}, fmt.Errorf("image %s: digest: %w", s.Ref, err)
	}
	if res.ID, err = img.ConfigName(); err != nil {
		return Result{}, fmt.Errorf("image %s: config digest: %w", s.Ref, err)
	}
	if err := writeArchive(path, s, img); err != nil {
		return Result{}, fmt.Errorf("image %s: write %s: %w", s.Ref, path, err)
	}
	return res, nil
}

func (s Spec) validate() error {
	if _, err := name.NewTag(s.Ref, name.StrictValidation); err != nil {
		return fmt.Errorf("image ref %q: give registry/repository:tag, as in ghcr.io/manifold-cni/manifold:v1: %w", s.Ref, err)
	}
	if len(s.Files) == 0 {
		return fmt.Errorf("image %s: no files", s.Ref)
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("image %s: file path %q: want an absolute, clean path below /", s.Ref, f.Path)
		}
		if seen[f.Path] {
			return fmt.Errorf("image %s: file path %q is given twice", s.Ref, f.Path)
		}
		seen[f.Path] = true
		if f.Mode&^os.ModePerm != 0 {
			return fmt.Errorf("image %s: file %s: mode %v: want permission bits only", s.Ref, f.Path, f.Mode)
		}
	}
	for p := range seen {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if seen[d] {
				return fmt.Errorf("image %s: file path %q is also the directory of %q", s.Ref, d, p)
			}
		}
	}
	return nil
}

// image is the image of s with the layer in layerTar (uncompressed).
func (s Spec) image(layerTar string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(layerTar,
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.DefaultCompression),
		tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compress the layer: %w", err)
	}
	cfg := &v1.ConfigFile{
		OS:           s.OS,
		Architecture: s.Arch,
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Entrypoint: slices.Clone(s.Entrypoint),
			Env:        slices.Clone(s.Env),
			WorkingDir: "/",
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "ociimage: " + s.paths()},
	})
}

// paths lists the image's files, for the layer's history entry.
func (s Spec) paths() string {
	var paths []string
	for _, f := range s.sortedFiles() {
		paths = append(paths, f.Path)
	}
	return strings.Join(paths, " ")
}

func (s Spec) sortedFiles() []File {
	files := slices.Clone(s.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files
}
