package ociimage_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/manifold-cni/manifold/ociimage"
)

const testRef = "registry.test/manifold/sample:v1"

// sampleSpec is a small image: two programs in /usr/local/bin, a config file
// elsewhere, with their sources in a temp dir.
func sampleSpec(t *testing.T) ociimage.Spec {
	t.Helper()
	dir := t.TempDir()
	src := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return ociimage.Spec{
		Ref:        testRef,
		OS:         "linux",
		Arch:       "arm64",
		Entrypoint: []string{"/usr/local/bin/one", "--flag"},
		Env:        []string{"PATH=/usr/local/bin"},
		Files: []ociimage.File{
			{Path: "/usr/local/bin/two", Mode: 0o755, Source: src("two", "second program")},
			{Path: "/usr/local/bin/one", Mode: 0o755, Source: src("one", "first program")},
			{Path: "/etc/sample/conf", Mode: 0o644, Source: src("conf", "key=value\n")},
		},
	}
}

func write(t *testing.T, path string, s ociimage.Spec) ociimage.Result {
	t.Helper()
	res, err := ociimage.Write(path, s)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if res.Path != path || res.Ref != s.Ref {
		t.Fatalf("Write returned path %q ref %q, want %q %q", res.Path, res.Ref, path, s.Ref)
	}
	return res
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriteIsReproducible: the same files give the same bytes, whatever the
// sources' dates, owners and modes and the order the files are listed in; a
// change of content, mode or entrypoint changes the digest, and a change of
// name changes the tarball but not the image.
func TestWriteIsReproducible(t *testing.T) {
	dir := t.TempDir()
	s := sampleSpec(t)
	first := write(t, filepath.Join(dir, "first.tar"), s)

	// The same image from touched, re-moded sources listed in another order.
	for _, f := range s.Files {
		if err := os.Chtimes(f.Source, time.Now(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f.Source, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	again := s
	again.Files = slices.Clone(s.Files)
	slices.Reverse(again.Files)
	second := write(t, filepath.Join(dir, "second.tar"), again)
	if first.Digest != second.Digest || first.ID != second.ID {
		t.Errorf("same files: digest %s then %s, ID %s then %s", first.Digest, second.Digest, first.ID, second.ID)
	}
	if !bytes.Equal(mustRead(t, first.Path), mustRead(t, second.Path)) {
		t.Errorf("same files: the two tarballs differ")
	}

	changed := func(what string, change func(*ociimage.Spec)) {
		c := sampleSpec(t)
		change(&c)
		res := write(t, filepath.Join(dir, what+".tar"), c)
		if res.Digest == first.Digest {
			t.Errorf("%s changed: digest %s did not", what, res.Digest)
		}
	}
	changed("content", func(c *ociimage.Spec) {
		if err := os.WriteFile(c.Files[0].Source, []byte("second program, patched"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	changed("mode", func(c *ociimage.Spec) { c.Files[2].Mode = 0o600 })
	changed("entrypoint", func(c *ociimage.Spec) { c.Entrypoint = []string{"/usr/local/bin/two"} })

	renamed := s
	renamed.Ref = "registry.test/manifold/sample:v2"
	other := write(t, filepath.Join(dir, "renamed.tar"), renamed)
	if other.Digest != first.Digest {
		t.Errorf("renamed: digest %s, want the image's %s unchanged", other.Digest, first.Digest)
	}
	if bytes.Equal(mustRead(t, first.Path), mustRead(t, other.Path)) {
		t.Errorf("renamed: the tarball did not change, so it does not carry the name")
	}
}

// TestArchiveEntries: the tarball holds exactly the layout, manifest.json
// and the three blobs, sorted, owned by root, dated the epoch, and so does the
// layer inside it.
func TestArchiveEntries(t *testing.T) {
	res := write(t, filepath.Join(t.TempDir(), "image.tar"), sampleSpec(t))
	hdrs, _ := readArchive(t, res.Path)
	var names []string
	for _, h := range hdrs {
		names = append(names, h.Name)
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("entry %s: mtime %s owner %d:%d (%q:%q), want the epoch and 0:0 with no names", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("entries are not sorted: %q", names)
	}
	var blobs int
	for _, n := range names {
		if strings.HasPrefix(n, "blobs/sha256/") && n != "blobs/sha256/" {
			blobs++
		}
	}
	want := []string{"blobs/", "blobs/sha256/", "index.json", "manifest.json", "oci-layout"}
	if blobs != 3 || !slices.Equal(slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return strings.HasPrefix(n, "blobs/sha256/") && n != "blobs/sha256/"
	}), want) {
		t.Errorf("entries %q: want %q and 3 blobs (manifest, config, layer)", names, want)
	}

	img, err := openLayout(t, res.Path).Image(res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	lhdrs, _ := tarEntries(t, rc)
	var lnames []string
	for _, h := range lhdrs {
		lnames = append(lnames, h.Name)
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("layer entry %s: mtime %s owner %d:%d (%q:%q), want the epoch and 0:0 with no names", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	wantLayer := []string{"etc/", "etc/sample/", "etc/sample/conf", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/one", "usr/local/bin/two"}
	if !slices.Equal(lnames, wantLayer) {
		t.Errorf("layer entries %q, want %q", lnames, wantLayer)
	}
}

// TestReadBackAsOCILayout reads the tarball as containerd and podman do: an
// OCI image layout whose index names the image and its platform.
func TestReadBackAsOCILayout(t *testing.T) {
	s := sampleSpec(t)
	res := write(t, filepath.Join(t.TempDir(), "image.tar"), s)
	idx := openLayout(t, res.Path)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.Digest != res.Digest || d.MediaType != types.OCIManifestSchema1 {
		t.Errorf("index.json: manifest %s (%s), want %s (%s)", d.Digest, d.MediaType, res.Digest, types.OCIManifestSchema1)
	}
	for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
		if d.Annotations[k] != testRef {
			t.Errorf("index.json: annotation %s = %q, want %q", k, d.Annotations[k], testRef)
		}
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "arm64" {
		t.Errorf("index.json: platform %+v, want linux/arm64", d.Platform)
	}
	img, err := idx.Image(res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Every digest, size and diff ID checked against the bytes.
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate: %v", err)
	}
	checkImage(t, img, s, res)
}

// TestReadBackAsDockerTarball reads the tarball as `docker load` does:
// through manifest.json, by its tag.
func TestReadBackAsDockerTarball(t *testing.T) {
	s := sampleSpec(t)
	res := write(t, filepath.Join(t.TempDir(), "image.tar"), s)
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(res.Path) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{testRef}) {
		t.Fatalf("manifest.json = %+v, want one image tagged %s", m, testRef)
	}
	tag, err := name.NewTag(testRef)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(res.Path, &tag)
	if err != nil {
		t.Fatalf("read %s as a docker tarball: %v", res.Path, err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate: %v", err)
	}
	// Docker computes its own manifest; the config, the image ID, is shared.
	checkImage(t, img, s, ociimage.Result{ID: res.ID})
}

// checkImage checks img's config and filesystem against s, and its digests
// against res where res has them.
func checkImage(t *testing.T, img v1.Image, s ociimage.Spec, res ociimage.Result) {
	t.Helper()
	if res.Digest != (v1.Hash{}) {
		if d, err := img.Digest(); err != nil || d != res.Digest {
			t.Errorf("image digest %s (%v), want %s", d, err, res.Digest)
		}
	}
	if id, err := img.ConfigName(); err != nil || id != res.ID {
		t.Errorf("config digest %s (%v), want %s", id, err, res.ID)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != s.OS || cfg.Architecture != s.Arch || !slices.Equal(cfg.Config.Entrypoint, s.Entrypoint) || !slices.Equal(cfg.Config.Env, s.Env) {
		got, _ := json.Marshal(cfg)
		t.Errorf("config %s: want %s/%s, entrypoint %q, env %q", got, s.OS, s.Arch, s.Entrypoint, s.Env)
	}
	files, dirs := filesystem(t, img)
	if len(files) != len(s.Files) {
		t.Errorf("image holds %d files, want %d", len(files), len(s.Files))
	}
	for _, f := range s.Files {
		got, ok := files[f.Path]
		want := string(mustRead(t, f.Source))
		if !ok || got.mode != int64(f.Mode) || got.content != want {
			t.Errorf("file %s = %+v (present %v), want mode %o content %q", f.Path, got, ok, f.Mode, want)
		}
	}
	slices.Sort(dirs)
	if want := []string{"/etc", "/etc/sample", "/usr", "/usr/local", "/usr/local/bin"}; !slices.Equal(dirs, want) {
		t.Errorf("image directories %q, want %q", dirs, want)
	}
}

// TestWriteRefusesBadSpecs: each bad field is named with its value, and
// nothing is left at the path or beside it.
func TestWriteRefusesBadSpecs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*ociimage.Spec)
		want   string
	}{
		{"ref without registry", func(s *ociimage.Spec) { s.Ref = "manifold:dev" }, `image ref "manifold:dev"`},
		{"ref without tag", func(s *ociimage.Spec) { s.Ref = "registry.test/manifold" }, `image ref "registry.test/manifold"`},
		{"no files", func(s *ociimage.Spec) { s.Files = nil }, "no files"},
		{"relative path", func(s *ociimage.Spec) { s.Files[0].Path = "usr/local/bin/two" }, `file path "usr/local/bin/two"`},
		{"unclean path", func(s *ociimage.Spec) { s.Files[0].Path = "/usr/local/../bin/two" }, `file path "/usr/local/../bin/two"`},
		{"root", func(s *ociimage.Spec) { s.Files[0].Path = "/" }, `file path "/"`},
		{"twice", func(s *ociimage.Spec) { s.Files[0].Path = "/usr/local/bin/one" }, `"/usr/local/bin/one" is given twice`},
		{"file as directory", func(s *ociimage.Spec) { s.Files[2].Path = "/usr/local/bin/one/conf" }, `"/usr/local/bin/one" is also the directory`},
		{"mode with type bits", func(s *ociimage.Spec) { s.Files[0].Mode = os.ModeSymlink | 0o777 }, "file /usr/local/bin/two: mode"},
		{"missing source", func(s *ociimage.Spec) { s.Files[1].Source = "/nonexistent/one" }, "/nonexistent/one"},
		{"directory source", func(s *ociimage.Spec) { s.Files[1].Source = t.TempDir() }, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := sampleSpec(t)
			tc.change(&s)
			_, err := ociimage.Write(filepath.Join(dir, "image.tar"), s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Write: error %v, want one naming %s", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left in the output dir: %v", left)
			}
		})
	}
}

// TestWriteKeepsOldTarballOnError: a failed write leaves the previous
// tarball as it was.
func TestWriteKeepsOldTarballOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "image.tar")
	write(t, path, sampleSpec(t))
	before := mustRead(t, path)
	s := sampleSpec(t)
	s.Files[0].Source = "/nonexistent/two"
	if _, err := ociimage.Write(path, s); err == nil {
		t.Fatal("Write with a missing source succeeded")
	}
	if !bytes.Equal(mustRead(t, path), before) {
		t.Error("the failed write changed the previous tarball")
	}
	if left, _ := os.ReadDir(filepath.Dir(path)); len(left) != 1 {
		t.Errorf("left in the output dir: %v, want only image.tar", left)
	}
}
