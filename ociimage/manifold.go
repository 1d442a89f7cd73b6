package ociimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// manifold's image, as deployments/Dockerfile builds it (a test keeps the two
// in step): the four static binaries in BinDir and nothing else.
const (
	// BinDir holds the binaries in the image.
	BinDir = "/usr/local/bin"
	// DefaultRepository is where manifold's image is published.
	DefaultRepository = "ghcr.io/manifold-cni/manifold"
)

// Binary is one of manifold's programs in the image.
type Binary struct {
	// Name is its file name in BinDir.
	Name string
	// Package is its main package, relative to the repository root.
	Package string
	// Stamped binaries get the version (-X main.Version and flow.Version);
	// manifold-shim has no version variable and is linked with -s -w only,
	// as the Makefile does.
	Stamped bool
}

// Binaries are the image's programs, in the order of the Makefile's build.
var Binaries = []Binary{
	{Name: "manifold", Package: "./cmd/manifold", Stamped: true},
	{Name: "manifold-daemon", Package: "./cmd/manifold-daemon", Stamped: true},
	{Name: "manifold-install", Package: "./cmd/manifold-install", Stamped: true},
	{Name: "manifold-shim", Package: "./cmd/manifold-shim"},
}

// Entrypoint is the image's entrypoint: the node installer, which the
// DaemonSets run.
var Entrypoint = []string{BinDir + "/manifold-install"}

// Env is the image's environment: the PATH that `docker build` gives an
// image built FROM scratch, so that both builds have the same config.
var Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// LDFlags are the linker flags of b for version: those of the Makefile's
// build.
func LDFlags(b Binary, version string) string {
	if !b.Stamped {
		return "-s -w"
	}
	return "-s -w -X main.Version=" + version + " -X github.com/manifold-cni/manifold/flow.Version=" + version
}

// Options are a build of manifold's image.
type Options struct {
	// Version is stamped into the binaries.
	Version string
	// Ref names the image; empty means DefaultRepository:Version.
	Ref string
	// OutPath is the tarball to write.
	OutPath string
	// RepoRoot is the manifold checkout to build; empty means the current
	// directory.
	RepoRoot string
	// Arch is the GOARCH to build for; empty means this machine's.
	Arch string
	// Go is the go command; empty means "go" on PATH.
	Go string
}

// versionRE is what a version may be: it goes into -ldflags, which splits on
// spaces, and into the default image tag.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$`)

// Build builds manifold's binaries (static, with the Makefile's flags) from
// o.RepoRoot and packs them as manifold's image at o.OutPath.
func Build(ctx context.Context, o Options) (Result, error) {
	if !versionRE.MatchString(o.Version) {
		return Result{}, fmt.Errorf("version %q: want letters, digits and _.+- (at most 128, not starting with . + or -)", o.Version)
	}
	if o.OutPath == "" {
		return Result{}, fmt.Errorf("no output path for the image")
	}
	if o.Ref == "" {
		// A tag cannot hold "+"; a version can (semver build metadata).
		o.Ref = DefaultRepository + ":" + strings.ReplaceAll(o.Version, "+", "_")
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.RepoRoot == "" {
		o.RepoRoot = "."
	}
	dir, err := os.MkdirTemp("", "manifold-image-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	// One go build per set of flags: it links its binaries in parallel.
	var groups []string
	packages := map[string][]string{}
	var files []File
	for _, b := range Binaries {
		flags := LDFlags(b, o.Version)
		if packages[flags] == nil {
			groups = append(groups, flags)
		}
		packages[flags] = append(packages[flags], b.Package)
		files = append(files, File{Path: path.Join(BinDir, b.Name), Mode: 0o755, Source: filepath.Join(dir, b.Name)})
	}
	for _, flags := range groups {
		args := append([]string{"build", "-trimpath", "-ldflags", flags, "-o", dir + "/"}, packages[flags]...)
		cmd := exec.CommandContext(ctx, o.Go, args...)
		cmd.Dir = o.RepoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return Result{}, fmt.Errorf("build %s for linux/%s: %w\n%s", strings.Join(packages[flags], " "), o.Arch, err, msg)
		}
	}
	return Write(o.OutPath, Spec{Ref: o.Ref, OS: "linux", Arch: o.Arch, Entrypoint: Entrypoint, Env: Env, Files: files})
}
