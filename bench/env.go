package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// Delegate sets.
const (
	kindReal = "real" // bridge, macvlan and ptp, each with host-local IPAM
	kindNoop = "noop" // the CNI noop test plugin: no work, so pure overhead
)

// namespace holds the benchmark's pods and NADs. It is not a system namespace,
// so manifold writes network-status and sends events, as for any workload.
const namespace = "bench"

// delegateTypes are the plugins manifold calls directly; the shim dir wraps
// these (and manifold), not host-local, which the delegates call.
var delegateTypes = []string{"bridge", "macvlan", "ptp", "noop"}

// bench is the node and cluster the benchmark runs on, and what it must undo.
type bench struct {
	ctx      context.Context
	cleanups []func()

	dir      string // everything on disk lives under here
	manifold string // the plugin binary under test
	plugins  string // the real CNI plugins
	binDir   string // plugins + manifold, as a node's /opt/cni/bin
	shimDir  string // the same, with manifold and delegateTypes wrapped by the shim
	shimLog  string
	baseDir  string // plugins + the baseline manifold (-baseline), or ""
	cniDir   string // manifold's cniDir
	netDir   string // the default networks' conflist files
	leaseDir string // host-local's data
	parent   string // host veth end that macvlan uses as its master
	bridges  [3]string

	cp  *controlplane.ControlPlane
	k8s kubernetes.Interface

	// runtime calls manifold with binDir; shimRuntime with shimDir; direct
	// calls the delegates themselves (the reference). All three use benchExec.
	runtime, shimRuntime, direct *libcni.CNIConfig
	baseRuntime                  *libcni.CNIConfig
	// thick is thick mode's daemon and shim (bench/thick.go); thickConc the
	// same for the concurrentAttachments arm; thickBase the same with
	// -baseline and -baseline-shim, or nil.
	thick, thickConc, thickBase *thickArm
	// floor is the floor arm's process (bench/floor.go).
	floor    *floorArm
	baseline string // the baseline manifold binary, or ""
	// delPause is the overhead section's pause between an ADD and its DEL
	// (-del-pause).
	delPause                  time.Duration
	baselineShim              string // the baseline manifold-shim binary, or ""
	runtimeCache, directCache string
	// confs is manifold's config list by arm+"/"+kind; refLists the
	// delegates' own config lists by kind and position.
	confs    map[string]*libcni.NetworkConfigList
	refLists map[string][]*libcni.NetworkConfigList

	runID string
	seq   atomic.Int64

	// meta is the run's description, which the overhead section adds to.
	meta *meta

	// watch follows process lifetimes; nil when the kernel's process events
	// connector is not available (then own times are not reported).
	watch *procWatch
}

// onCleanup registers f to run at the end, last registered first.
func (b *bench) onCleanup(f func()) { b.cleanups = append(b.cleanups, f) }

func (b *bench) cleanup() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.cleanups = nil
}

// setup builds the node and starts the control plane. Whatever it made is
// registered for cleanup as soon as it exists, so a failure half-way leaves
// nothing behind once cleanup runs.
func (b *bench) setup(manifoldBin, pluginsDir string, bins controlplane.Binaries) error {
	var err error
	b.runID = testenv.UniqueName("")
	b.dir, err = os.MkdirTemp("", "manifold-bench-")
	if err != nil {
		return err
	}
	b.onCleanup(func() { _ = os.RemoveAll(b.dir) })
	b.plugins = pluginsDir
	b.binDir = filepath.Join(b.dir, "bin")
	b.shimDir = filepath.Join(b.dir, "shimbin")
	b.shimLog = filepath.Join(b.shimDir, ".shim.log")
	b.cniDir = filepath.Join(b.dir, "cni")
	b.netDir = filepath.Join(b.dir, "net.d")
	b.leaseDir = filepath.Join(b.dir, "leases")
	for _, d := range []string{b.binDir, filepath.Join(b.shimDir, ".real"), b.cniDir, b.netDir, b.leaseDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if manifoldBin == "" {
		if manifoldBin, err = b.buildManifold(); err != nil {
			return err
		}
	}
	b.manifold = manifoldBin
	if err := b.fillBinDirs(); err != nil {
		return err
	}
	if err := b.hostLinks(); err != nil {
		return err
	}

	logf("starting etcd and kube-apiserver")
	b.cp, err = controlplane.Start(b.ctx, controlplane.Options{Binaries: bins, TempDir: b.dir})
	if err != nil {
		return err
	}
	b.onCleanup(b.cp.Stop)
	b.k8s = b.cp.Clientset()
	if err := b.cp.InstallCRD(b.ctx); err != nil {
		return err
	}
	_, err = b.k8s.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	if err := b.networks(); err != nil {
		return err
	}

	b.runtimeCache = filepath.Join(b.dir, "runtime-cache")
	b.directCache = filepath.Join(b.dir, "direct-cache")
	b.runtime = libcni.NewCNIConfigWithCacheDir([]string{b.binDir}, b.runtimeCache, &benchExec{})
	b.shimRuntime = libcni.NewCNIConfigWithCacheDir([]string{b.shimDir}, b.runtimeCache, &benchExec{})
	b.direct = libcni.NewCNIConfigWithCacheDir([]string{b.binDir}, b.directCache, &benchExec{})
	if err := b.setupThick(); err != nil {
		return err
	}
	if err := b.startFloor(); err != nil {
		return err
	}
	b.confs = map[string]*libcni.NetworkConfigList{}
	b.refLists = map[string][]*libcni.NetworkConfigList{}
	armDirs := map[string]string{armManifold: b.binDir, armShim: b.shimDir}
	if b.baseline != "" {
		b.baseRuntime = libcni.NewCNIConfigWithCacheDir([]string{b.baseDir}, b.runtimeCache, &benchExec{})
		armDirs[armBaseline] = b.baseDir
	}
	for _, kind := range []string{kindReal, kindNoop} {
		for arm, dir := range armDirs {
			if b.confs[arm+"/"+kind], err = b.manifoldConfList(kind, dir); err != nil {
				return err
			}
		}
		if b.confs[armThick+"/"+kind], err = b.thickConfList(kind, b.thick); err != nil {
			return err
		}
		conc, err := b.thickConfList(kind, b.thickConc)
		if err != nil {
			return err
		}
		if b.confs[armThickConcurrent+"/"+kind], err = withKeys(conc, map[string]any{"concurrentAttachments": true}); err != nil {
			return err
		}
		if b.thickBase != nil {
			if b.confs[armThickBaseline+"/"+kind], err = b.thickConfList(kind, b.thickBase); err != nil {
				return err
			}
		}
		for i := 0; i < maxNetworks; i++ {
			list, err := libcni.NetworkConfFromBytes([]byte(b.networkDef(kind, i).Conf))
			if err != nil {
				return err
			}
			b.refLists[kind] = append(b.refLists[kind], list)
		}
	}
	return nil
}

// buildManifold builds the plugin as `make build` does, when MANIFOLD_BIN is
// not set, and beside it manifold-daemon, which `manifold daemon` runs.
func (b *bench) buildManifold() (string, error) {
	logf("building manifold")
	out := filepath.Join(b.dir, "manifold-build")
	if err := b.goBuild(out, "./cmd/manifold", "-ldflags", "-s -w"); err != nil {
		return "", err
	}
	return out, b.goBuild(filepath.Join(b.dir, "manifold-daemon"), "./cmd/manifold-daemon", "-ldflags", "-s -w")
}

// goBuild builds the repository's package pkg into out, static.
func (b *bench) goBuild(out, pkg string, flags ...string) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(b.ctx, "go", append(append([]string{"build", "-trimpath"}, flags...), "-o", out, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", pkg, err, msg)
	}
	return nil
}

// fillBinDirs links every plugin and manifold into binDir, and builds the shim
// dir: the same links, except that manifold and each delegate type are copies
// of the shim, whose real binary sits in .real/.
func (b *bench) fillBinDirs() error {
	shimBin := filepath.Join(b.dir, "shim")
	if err := b.goBuild(shimBin, "./bench/shim"); err != nil {
		return err
	}
	entries, err := os.ReadDir(b.plugins)
	if err != nil {
		return err
	}
	shimmed := map[string]bool{}
	for _, t := range delegateTypes {
		shimmed[t] = true
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		src := filepath.Join(b.plugins, e.Name())
		if err := os.Symlink(src, filepath.Join(b.binDir, e.Name())); err != nil {
			return err
		}
		if !shimmed[e.Name()] {
			err = os.Symlink(src, filepath.Join(b.shimDir, e.Name()))
		} else if err = os.Symlink(src, filepath.Join(b.shimDir, ".real", e.Name())); err == nil {
			err = copyFile(shimBin, filepath.Join(b.shimDir, e.Name()))
		}
		if err != nil {
			return err
		}
	}
	if err := os.Symlink(b.manifold, filepath.Join(b.binDir, "manifold")); err != nil {
		return err
	}
	if b.baseline != "" {
		b.baseDir = filepath.Join(b.dir, "basebin")
		if err := os.Mkdir(b.baseDir, 0o755); err != nil {
			return err
		}
		if err := testenv.LinkBinDir(b.baseDir, b.plugins, b.baseline); err != nil {
			return err
		}
	}
	if err := os.Symlink(b.manifold, filepath.Join(b.shimDir, ".real", "manifold")); err != nil {
		return err
	}
	return copyFile(shimBin, filepath.Join(b.shimDir, "manifold"))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hostLinks makes the veth pair whose end is the macvlan master (this kernel
// has no dummy links) and names the bridges the bridge plugin will create.
func (b *bench) hostLinks() error {
	b.parent = testenv.UniqueName("mfbp")
	peer := testenv.UniqueName("mfbq")
	b.onCleanup(func() { deleteLink(b.parent) })
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: b.parent}, PeerName: peer}); err != nil {
		return fmt.Errorf("create veth %s: %w", b.parent, err)
	}
	for _, n := range []string{b.parent, peer} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("set %s up: %w", n, err)
		}
	}
	for i := range b.bridges {
		name := testenv.UniqueName("mfbb")
		b.bridges[i] = name
		b.onCleanup(func() { deleteLink(name) })
	}
	return nil
}

func deleteLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// newNetNS makes a network namespace that cleanup removes.
func (b *bench) newNetNS() (ns.NetNS, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, fmt.Errorf("create netns: %w", err)
	}
	b.onCleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n, nil
}

// trial is an interleaved measurement of arms in the bench's context, which
// forgets the finished processes of the reference arm after each iteration.
func (b *bench) trial(arms []string, warmup, n int) trial {
	return trial{ctx: b.ctx, arms: arms, warmup: warmup, n: n, after: func(int) error {
		if b.watch != nil {
			b.watch.pruneRoot()
		}
		return nil
	}}
}
