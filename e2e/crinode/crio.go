package crinode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// CRIOBinaries are CRI-O's programs: crio and pinns in Dir (hack/build-crio.sh),
// and Debian's conmon.
type CRIOBinaries struct {
	Dir    string
	Conmon string
}

// FindCRIO returns $MANIFOLD_CRIO_DIR when it is set, or else what
// hack/build-crio.sh builds. conmon and runc must be on PATH (Debian's
// packages).
func FindCRIO() (CRIOBinaries, error) { return findCRIOOnce() }

var findCRIOOnce = sync.OnceValues(func() (CRIOBinaries, error) {
	if _, err := onPath("runc", "runc"); err != nil {
		return CRIOBinaries{}, err
	}
	conmon, err := onPath("conmon", "conmon")
	if err != nil {
		return CRIOBinaries{}, err
	}
	b := CRIOBinaries{Dir: os.Getenv("MANIFOLD_CRIO_DIR"), Conmon: conmon}
	if b.Dir == "" {
		lines, err := hackBuild("build-crio.sh", 1)
		if err != nil {
			return CRIOBinaries{}, err
		}
		b.Dir = lines[0]
	}
	if err := executables(filepath.Join(b.Dir, "crio"), filepath.Join(b.Dir, "pinns")); err != nil {
		return CRIOBinaries{}, err
	}
	return b, nil
})

// CRIO is a running throwaway CRI-O with its CRI clients and the image
// registry it pulls the node image from. Everything it makes is under Dir:
// its storage (vfs), state, sockets, the pods' network namespaces (pinns)
// and runc's root; Stop removes all of it.
type CRIO struct {
	CRI

	runtimeProc

	bins CRIOBinaries
	opts Options
	reg  *ImageRegistry
	// nsBefore are the namespaces pinned under /var/run (HostNetNS) before
	// this CRI-O started: not ours to remove.
	nsBefore map[string]bool
}

// Kind is "crio".
func (c *CRIO) Kind() string { return "crio" }

// StartCRIO writes CRI-O's config, starts it, serves the node image from a
// registry on 127.0.0.1, pulls it through the CRI as ImageRef (it is the
// pause image too) and returns once the CRI answers. Options.Handlers are
// containerd's only. On error nothing is left.
func StartCRIO(ctx context.Context, bins CRIOBinaries, opts Options) (*CRIO, error) {
	if len(opts.Handlers) > 0 {
		return nil, fmt.Errorf("crinode: CRI-O takes no Handlers (a CNI conf dir per runtime handler is containerd's)")
	}
	dir, err := os.MkdirTemp(opts.TempDir, "manifold-crio-")
	if err != nil {
		return nil, err
	}
	c := &CRIO{CRI: CRI{Dir: dir, Socket: filepath.Join(dir, "crio.sock"), Image: ImageRef}, bins: bins, opts: opts,
		runtimeProc: runtimeProc{name: "crio", log: opts.Log, logFile: filepath.Join(dir, "crio.log")}}
	if opts.HostNetNS {
		c.nsBefore = hostNamespaces()
	}
	imageCacheOnce.Do(func() {
		_, err := os.Lstat(imageCacheDir)
		imageCacheOurs = os.IsNotExist(err)
	})
	trackNode(c, true)
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *CRIO) start(ctx context.Context) error {
	reg, err := StartImageRegistry()
	if err != nil {
		return err
	}
	c.reg = reg
	for _, d := range []string{"conf.d", "exits", "attach", "ns", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"crio.conf":       c.config(),
		"registries.conf": registriesConf(reg.Host),
		"policy.json":     `{"default": [{"type": "insecureAcceptAnything"}]}`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if err := buildRuncWrapper(ctx, filepath.Join(c.Dir, "runc-wrapper")); err != nil {
		return err
	}
	if err := c.launch(); err != nil {
		return err
	}
	if err := c.dial(); err != nil {
		return err
	}
	if err := c.waitCRI(ctx, "crio", c.doneChan(), c.LogTail); err != nil {
		return err
	}
	img, err := BuildImage(ctx, c.Dir)
	if err != nil {
		return err
	}
	return c.Import(ctx, img)
}

// mirroredRegistries are the registries whose images Import can put into
// CRI-O: the node image's (ImageRef), manifold's (ghcr.io), the demo's
// (registry.example) and the usual public ones (k8s.gcr.io: the agnhost
// stand-in of the cluster tier's dynnet tests). CRI-O reads its registries
// config once, so the list is fixed when it starts.
var mirroredRegistries = []string{"manifold.test", "ghcr.io", "registry.example", "docker.io", "registry.k8s.io", "k8s.gcr.io", "quay.io"}

// registriesConf is CRI-O's registries config: every registry of
// mirroredRegistries has the local one (host, plain HTTP) as its mirror, so
// that an image pushed there under its own path is pulled by its own name.
// The registries themselves are never reached when the mirror has the
// image; when it has not, the pull fails (no network here), as it should.
func registriesConf(host string) string {
	var b strings.Builder
	for _, r := range mirroredRegistries {
		fmt.Fprintf(&b, "[[registry]]\nprefix = %q\nlocation = %q\n[[registry.mirror]]\nlocation = %q\ninsecure = true\n\n",
			r, r, host+"/"+r)
	}
	return b.String()
}

// Import puts the images of a docker-save tarball (ociimage's, which names
// them in its manifest.json) into CRI-O's storage under their own names, as
// an admin loads an image onto a node that must not pull it from outside:
// each is pushed to the local registry and pulled through the CRI from
// there, its registry's mirror.
func (c *CRIO) Import(ctx context.Context, tarball string) error {
	refs, err := c.reg.PushTarball(ctx, tarball, mirroredRegistries)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if _, err := c.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			return fmt.Errorf("pull %s from the local registry: %w\n%s", ref, err, c.LogTail())
		}
	}
	return nil
}

// config is CRI-O's config. Each setting is here for a reason: every path
// of its own (state, storage, logs, sockets, conmon's exit and attach dirs,
// the namespaces pinns makes unless HostNetNS, runc's root, the hooks, CDI
// and keys dirs) in our dir, not under /var/lib/crio, /run/crio, /etc or /usr/share;
// the streaming server on 127.0.0.1; no irqbalance file written; the vfs storage driver (no overlay
// in a nested container); cgroupfs (no systemd here); runc behind the
// test-only wrapper (buildRuncWrapper); the node image as the pause image, from
// the local registry; CNI from the given dirs; NRI off.
func (c *CRIO) config() string {
	q := strconv.Quote
	d := func(p string) string { return q(filepath.Join(c.Dir, p)) }
	return `[crio]
root = ` + d("root") + `
runroot = ` + d("runroot") + `
storage_driver = "vfs"
log_dir = ` + d("pod-logs") + `
version_file = ` + d("version") + `
version_file_persist = ` + d("version-persist") + `
clean_shutdown_file = ` + d("clean.shutdown") + `

[crio.api]
listen = ` + q(c.Socket) + `
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
conmon = ` + q(c.bins.Conmon) + `
pinns_path = ` + q(filepath.Join(c.bins.Dir, "pinns")) + `
container_exits_dir = ` + d("exits") + `
container_attach_socket_dir = ` + d("attach") + `
namespaces_dir = ` + q(c.nsDir()) + `
hooks_dir = [` + d("hooks.d") + `]
cdi_spec_dirs = [` + d("cdi") + `]
decryption_keys_path = ` + d("keys") + `
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"

[crio.runtime.runtimes.runc]
runtime_path = ` + d("runc-wrapper") + `
runtime_type = "oci"
runtime_root = ` + d("runc") + `

[crio.image]
pause_image = ` + q(c.Image) + `
pause_command = ` + q(Pause) + `
signature_policy = ` + d("policy.json") + `
signature_policy_dir = ` + d("policies") + `
namespaced_auth_dir = ` + d("auth") + `

[crio.network]
network_dir = ` + q(c.opts.CNIConfDir) + `
plugin_dirs = [` + q(c.opts.CNIBinDir) + `]

[crio.nri]
enable_nri = false
`
}

// buildRuncWrapper builds runcwrap, a TEST-ONLY stand-in for runc that
// takes out of each container's OCI config what this sandbox cannot give it
// (an oom_score_adj below 0, hugepage limits, capabilities it lacks) and
// then runs runc: CRI-O's runtime_path here. See runcwrap's doc for each
// error it avoids. A real node runs runc itself.
func buildRuncWrapper(ctx context.Context, out string) error {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.runc="+runcPath(), "-o", out, "./e2e/crinode/runcwrap")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the runc wrapper: %w: %s", err, b)
	}
	return nil
}

// launch starts crio. It dies with the test process (Pdeathsig, on a locked
// thread as in Containerd.launch); conmon and the containers do not.
func (c *CRIO) launch() error {
	cmd := exec.Command(filepath.Join(c.bins.Dir, "crio"), "--config", filepath.Join(c.Dir, "crio.conf"),
		"--config-dir", filepath.Join(c.Dir, "conf.d"), "--log-level", "info")
	cmd.Env = append(os.Environ(), "CONTAINER_REGISTRIES_CONF="+filepath.Join(c.Dir, "registries.conf"))
	return c.startProc(cmd)
}

// Restart starts crio again on the same dirs after Kill or Shutdown, and
// waits for its CRI.
func (c *CRIO) Restart(ctx context.Context) error {
	if err := c.launch(); err != nil {
		return err
	}
	return c.waitCRI(ctx, "crio", c.doneChan(), c.LogTail)
}

// Shutdown stops crio with SIGTERM, as systemd stops it: its pods keep
// running.
func (c *CRIO) Shutdown() { c.terminate(30 * time.Second) }

// Stop removes every sandbox through the CRI (so the CNI DELs run), stops
// crio, and then removes whatever is still there: runc containers, conmon
// processes, mounts (network namespaces, shm), the registry and the dir.
func (c *CRIO) Stop() {
	if c.Runtime != nil && !c.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if list, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, sb := range list.Items {
				c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
				c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
			}
		}
		cancel()
	}
	c.Shutdown()
	c.closeConn()
	c.KillPods()
	c.removeNamespaces()
	unmountUnder(c.Dir)
	os.RemoveAll(c.Dir)
	if c.reg != nil {
		c.reg.Close()
		c.reg = nil
	}
	trackNode(c, false)
	if imageCacheOurs && !crioRunning() {
		os.RemoveAll(imageCacheDir)
	}
}

// imageCacheDir is where CRI-O's image library keeps its blob info cache
// when it runs as root, whatever its config says: the one path CRI-O writes
// outside Dir (besides libcni's cache, which the DELs empty). When this
// process made it (it was not there before the first StartCRIO), the last
// Stop removes it.
const imageCacheDir = "/var/lib/containers"

var (
	imageCacheOnce sync.Once
	imageCacheOurs bool
)

// crioRunning tells whether any CRIO of this process is still running.
func crioRunning() bool {
	running.Lock()
	defer running.Unlock()
	for n := range running.nodes {
		if _, ok := n.(*CRIO); ok {
			return true
		}
	}
	return false
}

// KillPods kills every container of this CRI-O (runc delete -f) and every
// conmon it started, as a crash of the node would; crio itself is left as
// it is. The network namespaces stay mounted.
func (c *CRIO) KillPods() {
	root := filepath.Join(c.Dir, "runc")
	if out, err := runcCmd("--root", root, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			runcCmd("--root", root, "delete", "-f", id).Run()
		}
	}
	for _, pid := range c.conmonPids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// conmonPids are the conmon processes whose command line names our dir.
func (c *CRIO) conmonPids() []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "conmon" && strings.Contains(string(b), c.Dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Reboot does to this CRI-O what a node's reboot does: crio, its conmons and
// every container die, and what lives on tmpfs goes: the run dir (runroot,
// conmon's exit files) and the pods' namespaces, the network ones with their
// interfaces. Its storage (root) stays. Restart brings it back.
func (c *CRIO) Reboot() {
	c.Kill()
	c.KillPods()
	c.removeNamespaces()
	for _, d := range []string{"runroot", "exits"} {
		p := filepath.Join(c.Dir, d)
		unmountUnder(p)
		os.RemoveAll(p)
	}
	os.MkdirAll(filepath.Join(c.Dir, "exits"), 0o755)
}

// nsDir is CRI-O's namespaces_dir: pinns pins each pod's namespaces at
// <nsDir>/{net,ipc,uts}ns/<uuid>. With HostNetNS it is /var/run, CRI-O's
// default, so that the network namespaces are in /var/run/netns, where a
// DaemonSet that mounts it (the thick one) finds them.
func (c *CRIO) nsDir() string {
	if c.opts.HostNetNS {
		return hostNSDir
	}
	return filepath.Join(c.Dir, "ns")
}

// hostNSDir is a node's namespaces_dir, CRI-O's default.
const hostNSDir = "/var/run"

// pinnedNSTypes are the namespace dirs pinns makes under namespaces_dir.
var pinnedNSTypes = []string{"netns", "ipcns", "utsns", "userns", "pidns"}

// hostNamespaces are the namespace dirs and the namespaces pinned in them
// under /var/run now.
func hostNamespaces() map[string]bool {
	out := map[string]bool{}
	for _, t := range pinnedNSTypes {
		d := filepath.Join(hostNSDir, t)
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		out[d] = true
		for _, e := range entries {
			out[filepath.Join(d, e.Name())] = true
		}
	}
	return out
}

// removeNamespaces unmounts and removes the namespaces this CRI-O pinned:
// its own ns dir, or (HostNetNS) what it added under /var/run, the dirs
// included. With a network namespace go the pod ends of its interfaces.
// Under /var/run only names that pinns gives (a UUID) are touched: other
// tests (the cnitest-… of the CNI testutils, the bench's) may hold
// namespaces there at the same time.
func (c *CRIO) removeNamespaces() {
	if !c.opts.HostNetNS {
		p := filepath.Join(c.Dir, "ns")
		unmountUnder(p)
		os.RemoveAll(p)
		os.MkdirAll(p, 0o755)
		return
	}
	for _, t := range pinnedNSTypes {
		d := filepath.Join(hostNSDir, t)
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			if !c.nsBefore[p] && isUUID(e.Name()) {
				unix.Unmount(p, unix.MNT_DETACH)
				os.Remove(p)
			}
		}
		if !c.nsBefore[d] && t != "netns" {
			os.Remove(d) // only when empty
		}
	}
}

// SandboxConfig is CRI.SandboxConfig with a PID namespace per container, as
// the kubelet asks for a pod by default: CRI-O then runs no infra container
// (drop_infra_ctr, its default), and the pod's network namespace is held by
// pinns alone. With a pod-wide PID namespace, CRI-O runs pause as the
// namespace's PID 1 and stops it with SIGTERM; here that stop often waited
// until the call's deadline (2 minutes) for a pause that had not exited.
func (c *CRIO) SandboxConfig(namespace, name, uid string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	cfg := c.CRI.SandboxConfig(namespace, name, uid, annotations)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
	}
	return cfg
}

var (
	crioDefaultNet = regexp.MustCompile(`Updated default CNI network name to ([^"\s]+)`)
	crioFoundNet   = regexp.MustCompile(`Found CNI network (\S+) \(type=([^)\s]+)\)`)
)

// LoadedCNI is the CNI network CRI-O uses now: the last one its log names as
// its default (ocicni logs it at each reload of the conf dir; CRI-O's CRI
// status does not hold its CNI config, unlike containerd's), with its first
// plugin's type. It needs the log in its file (no Options.Log).
func (c *CRIO) LoadedCNI(ctx context.Context) ([]CNINetwork, error) {
	if c.log != nil {
		return nil, fmt.Errorf("crinode: CRI-O's log goes to Options.Log: its loaded CNI network cannot be read")
	}
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return nil, err
	}
	var def string
	types := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := crioFoundNet.FindStringSubmatch(line); m != nil {
			types[m[1]] = m[2]
		}
		if m := crioDefaultNet.FindStringSubmatch(line); m != nil {
			def = m[1]
		}
	}
	if def == "" {
		return nil, nil
	}
	return []CNINetwork{{Name: def, Types: []string{types[def]}}}, nil
}
