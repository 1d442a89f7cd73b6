package ociimage_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/ociimage"
)

// TestBuildManifoldImage builds manifold's image three times from this
// checkout: twice with one version (the same bytes), once with another (a
// new digest). The image holds exactly the four binaries, and its manifold
// carries the version it was built with.
func TestBuildManifoldImage(t *testing.T) {
	if testing.Short() {
		//testlint:skip -short is the runner's own request to leave out slow tests; make test and CI never pass it
		t.Skip("builds manifold's binaries three times")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	build := func(file, version string) ociimage.Result {
		t.Helper()
		res, err := ociimage.Build(ctx, ociimage.Options{Version: version, OutPath: filepath.Join(dir, file), RepoRoot: ".."})
		if err != nil {
			t.Fatal(err)
		}
		if want := ociimage.DefaultRepository + ":" + version; res.Ref != want {
			t.Errorf("ref %q, want %q", res.Ref, want)
		}
		return res
	}
	a := build("a.tar", "v0.0.1-test")
	b := build("b.tar", "v0.0.1-test")
	if a.Digest != b.Digest || !bytes.Equal(mustRead(t, a.Path), mustRead(t, b.Path)) {
		t.Errorf("two builds of one tree and version: digests %s and %s, tarballs equal: %v", a.Digest, b.Digest, bytes.Equal(mustRead(t, a.Path), mustRead(t, b.Path)))
	}
	c := build("c.tar", "v0.0.2-test")
	if c.Digest == a.Digest {
		t.Errorf("another version gave the same digest %s", c.Digest)
	}

	img, err := openLayout(t, c.Path).Image(c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filesystem(t, img)
	var got, want []string
	for p, f := range files {
		got = append(got, p)
		if f.mode != 0o755 {
			t.Errorf("%s has mode %o, want 0755", p, f.mode)
		}
	}
	for _, b := range ociimage.Binaries {
		want = append(want, path.Join(ociimage.BinDir, b.Name))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("image files %q, want %q", got, want)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, ociimage.Entrypoint) || cfg.OS != "linux" {
		t.Errorf("config: %s, entrypoint %q; want linux and %q", cfg.OS, cfg.Config.Entrypoint, ociimage.Entrypoint)
	}

	// Run without CNI_COMMAND, the plugin names itself and its version.
	bin := filepath.Join(dir, "manifold")
	if err := os.WriteFile(bin, []byte(files["/usr/local/bin/manifold"].content), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run the image's manifold: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "manifold v0.0.2-test:") {
		t.Errorf("the image's manifold says %q, want its version v0.0.2-test", stderr.String())
	}
}

// TestBuildRefusesBadVersions: a version goes into -ldflags and the tag, and
// one that would break either is refused before anything is built.
func TestBuildRefusesBadVersions(t *testing.T) {
	for _, v := range []string{"", "v1 -X main.x=y", "-v1", strings.Repeat("1", 129), "v1/2"} {
		_, err := ociimage.Build(context.Background(), ociimage.Options{Version: v, OutPath: filepath.Join(t.TempDir(), "x.tar"), RepoRoot: "..", Go: "/nonexistent/go"})
		if err == nil || !strings.Contains(err.Error(), "version") {
			t.Errorf("version %q: error %v, want one naming the version", v, err)
		}
	}
}
