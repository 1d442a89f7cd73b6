package e2e

// manifold's image as `make image` builds it (ociimage), imported into a real
// containerd with `ctr images import` and run through the CRI, as the
// kubelet runs the DaemonSet's containers: FROM scratch, so every binary must
// start with nothing but itself.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/ociimage"
)

// TestManifoldImageInContainerd: the image imports under its own name and
// digest, its entrypoint is the installer, and each binary runs in it: the
// plugin names the version stamped in, `manifold daemon` finds
// manifold-daemon beside it, and the shim starts.
func TestManifoldImageInContainerd(t *testing.T) {
	bins := nodeBinaries(t)
	root, err := testenv.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	const ref, version = "registry.test/manifold/manifold:e2e", "v0.0.0-e2e"
	img, err := ociimage.Build(ctx, ociimage.Options{Version: version, Ref: ref, OutPath: filepath.Join(tmp, "manifold.tar"), RepoRoot: root})
	if err != nil {
		t.Fatal(err)
	}

	// No CNI config: the containers below share the node's network, as the
	// DaemonSets' pods do, and need none.
	for _, d := range []string{"bin", "net.d"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	node, err := crinode.Start(ctx, bins, crinode.Options{CNIBinDir: filepath.Join(tmp, "bin"), CNIConfDir: filepath.Join(tmp, "net.d"), TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd log:\n%s", node.LogTail())
		}
		node.Stop()
	})
	if err := node.Import(ctx, img.Path); err != nil {
		t.Fatal(err)
	}
	out, err := node.Ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	var listed bool
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ref {
			listed = true
			if f[2] != img.Digest.String() {
				t.Errorf("ctr images ls: %s has digest %s, want %s", ref, f[2], img.Digest)
			}
		}
	}
	if !listed {
		t.Fatalf("ctr images ls does not list %s:\n%s", ref, out)
	}
	st, err := node.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil || st.Image == nil {
		t.Fatalf("CRI ImageStatus %s: %v (image %v)", ref, err, st.GetImage())
	}
	if st.Image.Id != img.ID.String() {
		t.Errorf("CRI image ID %s, want the config digest %s", st.Image.Id, img.ID)
	}

	cfg := node.SandboxConfig("default", "manifold-image", "manifold-image-uid", nil)
	// The node's network and so its UTS namespace: no hostname of its own.
	cfg.Hostname = ""
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	sandbox, err := node.RunSandbox(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		command, args []string
		// code is the exit code wanted; -1: any.
		code int32
		want string
	}{
		// The entrypoint, with the args alone: the installer's usage.
		{"entrypoint", nil, []string{"--help"}, 0, "Usage of /usr/local/bin/manifold-install"},
		// Without CNI_COMMAND the plugin names itself.
		{"plugin", []string{"/usr/local/bin/manifold"}, nil, 0, "manifold " + version + ": a CNI meta-plugin"},
		{"daemon", []string{"/usr/local/bin/manifold", "daemon", "--help"}, nil, 2, "-host-root"},
		// With no config on stdin and no daemon, the shim says so.
		{"shim", []string{"/usr/local/bin/manifold-shim"}, nil, -1, "manifold-shim: "},
	} {
		id, err := node.RunImage(ctx, sandbox, cfg, ref, tc.name, tc.command, tc.args)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		code, log, err := node.WaitExited(wctx, id, cfg)
		wcancel()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if (tc.code >= 0 && code != tc.code) || !strings.Contains(log, tc.want) {
			t.Errorf("%s: exit code %d, log:\n%s\nwant code %d and %q", tc.name, code, log, tc.code, tc.want)
		}
	}
}
