package ociimage_test

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// imageFile is a regular file as the image's filesystem holds it.
type imageFile struct {
	mode    int64
	content string
}

// tarEntries reads every header and regular file of a tar stream.
func tarEntries(t *testing.T, r io.Reader) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	tr := tar.NewReader(r)
	var hdrs []*tar.Header
	data := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		hdrs = append(hdrs, hdr)
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("read %s: %v", hdr.Name, err)
			}
			data[hdr.Name] = b
		}
	}
}

// readArchive returns the archive's headers and files.
func readArchive(t *testing.T, path string) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tarEntries(t, f)
}

// openLayout unpacks the archive into a temp dir and opens it as an OCI
// image layout.
func openLayout(t *testing.T, path string) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	_, files := readArchive(t, path)
	for name, b := range files {
		if !filepath.IsLocal(name) {
			t.Fatalf("archive entry %q is not a local path", name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("open %s as an OCI layout: %v", path, err)
	}
	return idx
}

// filesystem is the image's flattened filesystem: its regular files by
// absolute path, and the directories.
func filesystem(t *testing.T, img v1.Image) (files map[string]imageFile, dirs []string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs, data := tarEntries(t, rc)
	files = map[string]imageFile{}
	for _, h := range hdrs {
		p := "/" + strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeReg:
			files[p] = imageFile{mode: h.Mode, content: string(data[h.Name])}
		case tar.TypeDir:
			dirs = append(dirs, p)
		default:
			t.Errorf("image entry %s has type %q, want only files and directories", h.Name, h.Typeflag)
		}
	}
	return files, dirs
}
