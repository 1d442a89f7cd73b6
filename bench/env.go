package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/netconf"
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

// network is one delegate network, by position in a pod's list.
type network struct {
	Name string
	Conf string // conflist JSON, byte for byte what the delegates get from both arms
}

func netName(kind string, i int) string { return fmt.Sprintf("bench-%s-%d", kind, i) }

// networkDef is network i of a delegate set. Position 0 is the default
// network (clusterNetwork, a conflist file); the others are NADs. The real set
// cycles bridge, macvlan, ptp, each on its own /24, so an 8-network pod has
// three bridges, three macvlans and two ptps.
func (b *bench) networkDef(kind string, i int) network {
	name := netName(kind, i)
	var plugin string
	if kind == kindNoop {
		plugin = fmt.Sprintf(`{"type":"noop","debugFile":%q}`, b.noopDebugPath(i))
	} else {
		ipam := fmt.Sprintf(`{"type":"host-local","subnet":"10.250.%d.0/24","dataDir":%q}`, i, b.leaseDir)
		switch i % 3 {
		case 0:
			if i == 0 {
				ipam = fmt.Sprintf(`{"type":"host-local","subnet":"10.250.0.0/24","dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}`, b.leaseDir)
			}
			plugin = fmt.Sprintf(`{"type":"bridge","bridge":%q,"isGateway":%t,"ipam":%s}`, b.bridges[i/3], i == 0, ipam)
		case 1:
			plugin = fmt.Sprintf(`{"type":"macvlan","master":%q,"mode":"bridge","ipam":%s}`, b.parent, ipam)
		case 2:
			plugin = fmt.Sprintf(`{"type":"ptp","ipam":%s}`, ipam)
		}
	}
	return network{Name: name, Conf: fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[%s]}`, name, plugin)}
}

const maxNetworks = 8

// noopDebugPath is the debug file of noop network i. noop needs one (it
// panics at start-up without it once CNI_ARGS is set) and answers ADD with the
// result stored in it.
func (b *bench) noopDebugPath(i int) string {
	return filepath.Join(b.dir, "noop", fmt.Sprintf("debug-%d.json", i))
}

// writeNoopDebug gives noop network i a one-interface, one-address result, so
// manifold has a realistic result to turn into network-status.
func (b *bench) writeNoopDebug(i int) error {
	result := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":%q,"mac":"02:00:00:00:00:%02x","sandbox":"/var/run/netns/bench"}],`+
		`"ips":[{"address":"10.251.%d.2/24","gateway":"10.251.%d.1","interface":0}]}`, ifName(i), i, i, i)
	debug, err := json.Marshal(map[string]any{"reportResult": result})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.noopDebugPath(i)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(b.noopDebugPath(i), debug, 0o644)
}

// networks writes both default networks and creates the NADs of positions
// 1..7 of both sets.
func (b *bench) networks() error {
	for i := 0; i < maxNetworks; i++ {
		if err := b.writeNoopDebug(i); err != nil {
			return err
		}
	}
	for _, kind := range []string{kindReal, kindNoop} {
		def := b.networkDef(kind, 0)
		if err := os.WriteFile(b.defaultNetPath(kind), []byte(def.Conf), 0o644); err != nil {
			return err
		}
		for i := 1; i < maxNetworks; i++ {
			n := b.networkDef(kind, i)
			if err := b.createNAD(namespace, n.Name, n.Conf, nil, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// createNAD creates a NAD (a dry run with dryRun) with annotations.
func (b *bench) createNAD(ns, name, config string, annotations map[string]string, dryRun bool) error {
	obj, err := nadv1.New(ns, name, config).ToUnstructured()
	if err != nil {
		return err
	}
	obj.SetAnnotations(annotations)
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err = b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(ns).Create(ctx, obj, opts); err != nil {
		return fmt.Errorf("create NAD %s: %w", name, err)
	}
	return nil
}

func (b *bench) defaultNetPath(kind string) string {
	return filepath.Join(b.netDir, netName(kind, 0)+".conflist")
}

// manifoldConfList is manifold's config as a runtime holds it: manifold as
// the only plugin of a conflist, with the kind's default network as
// clusterNetwork and binDir as given. Logging stays at its default (errors
// only, to stderr), as on a node that configures none.
func (b *bench) manifoldConfList(kind, binDir string) (*libcni.NetworkConfigList, error) {
	plugin := map[string]any{
		"type":           "manifold",
		"kubeconfig":     b.cp.KubeconfigPath,
		"clusterNetwork": b.defaultNetPath(kind),
		"cniDir":         b.cniDir,
		"confDir":        b.netDir,
		"binDir":         binDir,
		// As manifold-install writes it: the runtime passes the pod's annotations.
		"capabilities": map[string]bool{netconf.CapPodAnnotations: true},
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "manifold-bench", "plugins": []any{plugin}})
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(raw)
}

// podSpec is one pod: its object, and its delegate set and network count.
type podSpec struct {
	Kind     string
	Networks int
	Obj      *corev1.Pod
}

// createPod creates a pod that asks for networks 1..n-1 of a set.
func (b *bench) createPod(name, kind string, n int) (*podSpec, error) {
	var refs []string
	for i := 1; i < n; i++ {
		refs = append(refs, netName(kind, i))
	}
	var annotations map[string]string
	if len(refs) > 0 {
		annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": strings.Join(refs, ",")}
	}
	p, err := b.createPodWith(name, kind, annotations)
	if err != nil {
		return nil, err
	}
	p.Networks = n
	return p, nil
}

// createPodWith creates a pod on the benchmark's node with annotations.
func (b *bench) createPodWith(name, kind string, annotations map[string]string) (*podSpec, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:   benchNode,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	created, err := b.k8s.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return &podSpec{Kind: kind, Obj: created}, nil
}

// sandbox is one ADD/DEL target: a pod in a netns under a fresh container ID.
type sandbox struct {
	Pod         *podSpec
	NetNS       string
	ContainerID string
	// OlderRuntime: the runtime does not pass the pod's annotations, so
	// manifold reads the pod.
	OlderRuntime bool
}

// capabilityArgs are the capability args containerd and CRI-O pass for a pod:
// its annotations, as the kubelet gives them (none for an older runtime).
// libcni passes them only to a plugin that declares the capability.
func (s *sandbox) capabilityArgs() map[string]any {
	if s.OlderRuntime {
		return nil
	}
	return map[string]any{netconf.CapPodAnnotations: testenv.KubeletAnnotations(s.Pod.Obj.Annotations, s.Pod.Obj.CreationTimestamp.Time)}
}

func (b *bench) newSandbox(p *podSpec, netns string) *sandbox {
	id := fmt.Sprintf("bench%s%08d", b.runID, b.seq.Add(1))
	return &sandbox{Pod: p, NetNS: netns, ContainerID: id}
}

// args are the CNI_ARGS containerd sends for a pod.
func (s *sandbox) args() [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", s.Pod.Obj.Namespace},
		{"K8S_POD_NAME", s.Pod.Obj.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", s.ContainerID},
		{"K8S_POD_UID", string(s.Pod.Obj.UID)},
	}
}

func ifName(i int) string {
	if i == 0 {
		return "eth0"
	}
	return fmt.Sprintf("net%d", i)
}

// listFiles returns the regular files under dir (for the leftovers check).
func listFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	return out, err
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
