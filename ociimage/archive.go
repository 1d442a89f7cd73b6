package ociimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The annotations that name the image in index.json. containerd (`ctr images
// import`, and Docker with the containerd store) takes the first; podman
// takes the second, and a bare tag there would become "localhost/<tag>", so
// both carry the whole reference, as `podman save --format oci-archive`
// writes it.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// blob is one file of the archive: a blob, or one of the layout's files.
type blob struct {
	name string
	size int64
	open func() (io.ReadCloser, error)
}

func bytesBlob(name string, b []byte) blob {
	return blob{name: name, size: int64(len(b)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// archiveBlobs lists the archive's files: the layout's oci-layout and
// index.json, Docker's manifest.json, and the blobs (manifest, config,
// layers).
func archiveBlobs(s Spec, img v1.Image) ([]blob, error) {
	// The manifest names every other blob: its descriptors are the paths.
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(manifest))
	if err != nil {
		return nil, err
	}
	digest, _, err := v1.SHA256(bytes.NewReader(manifest))
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	blobs := []blob{bytesBlob(blobPath(digest), manifest), bytesBlob(blobPath(m.Config.Digest), config)}
	var layerPaths []string
	for _, d := range m.Layers {
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, blob{name: blobPath(d.Digest), size: d.Size, open: l.Compressed})
		layerPaths = append(layerPaths, blobPath(d.Digest))
	}

	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType:   types.OCIManifestSchema1,
			Size:        int64(len(manifest)),
			Digest:      digest,
			Annotations: map[string]string{annotationContainerdName: s.Ref, annotationRefName: s.Ref},
			// ctr unpacks only the platforms that it is told or that the
			// index names.
			Platform: &v1.Platform{OS: s.OS, Architecture: s.Arch},
		}},
	})
	if err != nil {
		return nil, err
	}
	dockerManifest, err := json.Marshal(tarball.Manifest{{
		Config:   blobPath(m.Config.Digest),
		RepoTags: []string{s.Ref},
		Layers:   layerPaths,
	}})
	if err != nil {
		return nil, err
	}
	blobs = append(blobs,
		bytesBlob("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		bytesBlob("index.json", index),
		bytesBlob("manifest.json", dockerManifest))
	slices.SortFunc(blobs, func(a, b blob) int { return strings.Compare(a.name, b.name) })
	return blobs, nil
}

// writeArchive writes the archive to a temp file beside path, then renames it
// over path.
func writeArchive(path string, s Spec, img v1.Image) error {
	blobs, err := archiveBlobs(s, img)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	bw := bufio.NewWriterSize(f, 1<<20)
	err = writeBlobs(bw, blobs)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeBlobs writes the directories blobs/ and blobs/sha256/, then the files
// in the order given.
func writeBlobs(w io.Writer, blobs []blob) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		if err := writeBlob(tw, b); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	return tw.Close()
}

func writeBlob(tw *tar.Writer, b blob) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: b.name, Mode: 0o644, Size: b.size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	rc, err := b.open()
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(tw, rc)
	return err
}
