// Package crinode runs a throwaway node runtime for manifold's runtime tier,
// its real node in e2e, the demo and the bench (issue 23): containerd 2.x with
// Debian's runc, driven over its real CRI gRPC API (k8s.io/cri-api), and
// optionally a kubelet on it. Everything lives in one temp dir, except the
// shim sockets, which containerd always puts under /run/containerd/s/; Stop
// removes all of it, the mounts, the processes and those sockets included.
package crinode

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrBinariesUnavailable means containerd or the kubelet could not be found
// or built; tests skip on it unless privileged tests are required.
var ErrBinariesUnavailable = errors.New("node binaries unavailable")

// Binaries are the node's programs: containerd, ctr and
// containerd-shim-runc-v2 in ContainerdDir, and the kubelet.
type Binaries struct {
	ContainerdDir string
	Kubelet       string
}

// FindBinaries returns $MANIFOLD_CONTAINERD_DIR and $MANIFOLD_KUBELET (which
// may be empty: no kubelet) when the first is set, or else what
// hack/build-node.sh builds. runc must be on PATH (Debian's package).
func FindBinaries() (Binaries, error) { return findBinariesOnce() }

var findBinariesOnce = sync.OnceValues(func() (Binaries, error) {
	if _, err := onPath("runc", "runc"); err != nil {
		return Binaries{}, err
	}
	b := Binaries{ContainerdDir: os.Getenv("MANIFOLD_CONTAINERD_DIR"), Kubelet: os.Getenv("MANIFOLD_KUBELET")}
	if b.ContainerdDir == "" {
		lines, err := hackBuild("build-node.sh", 2)
		if err != nil {
			return Binaries{}, err
		}
		b = Binaries{ContainerdDir: lines[0], Kubelet: lines[1]}
	}
	if err := executables(filepath.Join(b.ContainerdDir, "containerd"), filepath.Join(b.ContainerdDir, "ctr"),
		filepath.Join(b.ContainerdDir, "containerd-shim-runc-v2"), b.Kubelet); err != nil {
		return Binaries{}, err
	}
	return b, nil
})

// Options configure Start.
type Options struct {
	// CNIBinDir and CNIConfDir are the CRI plugin's CNI dirs: the node's
	// /opt/cni/bin and /etc/cni/net.d.
	CNIBinDir, CNIConfDir string
	// TempDir is the parent of containerd's dir; empty means os.TempDir().
	TempDir string
	// Log receives containerd's output; nil means a file in its dir.
	Log io.Writer
	// HostNetNS puts the pods' network namespaces where a node's containerd
	// puts them, /var/run/netns, instead of under its own state dir, so that a
	// DaemonSet that mounts /var/run/netns (the thick one) sees them.
	HostNetNS bool
	// Handlers are extra runtime handlers (RuntimeClasses), each with a CNI
	// conf dir of its own: a pod of that class gets that dir's config.
	Handlers []Handler
}

// Handler is a runc runtime handler whose pods get the CNI config in
// CNIConfDir (containerd's per-runtime cni_conf_dir).
type Handler struct {
	Name       string
	CNIConfDir string
}

// Containerd is a running throwaway containerd with its CRI clients. Its
// Dir holds the config, root, state, runc's root and the socket, the
// containerd (and CRI) socket.
type Containerd struct {
	CRI

	runtimeProc

	bins Binaries
	opts Options
	// netnsBefore are the cni-* namespaces in /var/run/netns that were there
	// before this containerd started (HostNetNS): not ours to remove.
	netnsBefore map[string]bool
}

// Start writes the config, starts containerd, imports the node image (built
// here, never pulled) and returns once the CRI answers. On error nothing is
// left.
func Start(ctx context.Context, bins Binaries, opts Options) (*Containerd, error) {
	dir, err := os.MkdirTemp(opts.TempDir, "manifold-containerd-")
	if err != nil {
		return nil, err
	}
	c := &Containerd{CRI: CRI{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), Image: ImageRef},
		bins: bins, opts: opts}
	c.runtimeProc = runtimeProc{name: "containerd", log: opts.Log, logFile: filepath.Join(dir, "containerd.log")}
	if opts.HostNetNS {
		c.netnsBefore = HostNetNSNames()
	}
	track(c, nil, true)
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Containerd) start(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(c.Dir, "config.toml"), []byte(c.config()), 0o644); err != nil {
		return err
	}
	if err := c.launch(ctx); err != nil {
		return err
	}
	if err := c.dial(); err != nil {
		return err
	}
	if err := c.waitCRI(ctx); err != nil {
		return err
	}
	img, err := BuildImage(ctx, c.Dir)
	if err != nil {
		return err
	}
	return c.Import(ctx, img)
}

// Import imports an image tarball (ociimage's, or any OCI layout or docker
// save tarball) into the k8s.io namespace, as `ctr -n k8s.io images import`
// does on a node, and unpacks it for the CRI's snapshotter.
func (c *Containerd) Import(ctx context.Context, tarball string) error {
	if out, err := c.Ctr(ctx, "images", "import", "--snapshotter", "native", tarball); err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", tarball, err, out)
	}
	return nil
}

// config is containerd's config, version 4. Each setting is here for a reason:
// the sockets in our dir (a top-level [grpc] table is ignored in v4), the
// native snapshotter (no overlay in a nested container), netns mounts under
// the state dir, runc's root in our dir, NRI off, restrict_oom_score_adj
// (without CAP_SYS_RESOURCE runc cannot set a sandbox's -998, and every
// sandbox fails), the pinned sandbox image, and CNI from the given dirs with
// one conf file, as a node runs manifold (lo is brought up by containerd
// itself, so the loopback plugin is not needed).
func (c *Containerd) config() string {
	q := strconv.Quote
	d := func(p string) string { return q(filepath.Join(c.Dir, p)) }
	return `version = 4
root = ` + d("root") + `
state = ` + d("state") + `
temp = ` + d("tmp") + `
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins.'io.containerd.server.v1.grpc']
  address = ` + q(c.Socket) + `
[plugins.'io.containerd.server.v1.ttrpc']
  address = ` + q(c.Socket+".ttrpc") + `
[plugins.'io.containerd.internal.v1.opt']
  path = ` + d("opt") + `

[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = ` + q(ImageRef) + `

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = ` + strconv.FormatBool(!c.opts.HostNetNS) + `
  enable_selinux = false
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = "native"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = ` + q(runcPath()) + `
        Root = ` + d("runc") + `
` + c.handlers() + `  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [` + q(c.opts.CNIBinDir) + `]
    conf_dir = ` + q(c.opts.CNIConfDir) + `
    max_conf_num = 1
    use_internal_loopback = true
`
}

// handlers is the config of the extra runtime handlers: runc, as the default
// one, with their own CNI conf dir.
func (c *Containerd) handlers() string {
	q := strconv.Quote
	var b strings.Builder
	for _, h := range c.opts.Handlers {
		t := "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes." + q(h.Name) + "]"
		b.WriteString("    " + t + "\n")
		b.WriteString("      runtime_type = \"io.containerd.runc.v2\"\n      snapshotter = \"native\"\n")
		b.WriteString("      cni_conf_dir = " + q(h.CNIConfDir) + "\n      cni_max_conf_num = 1\n")
		b.WriteString("      " + t[:len(t)-1] + ".options]\n")
		b.WriteString("        BinaryName = " + q(runcPath()) + "\n        Root = " + q(filepath.Join(c.Dir, "runc")) + "\n")
	}
	return b.String()
}

func runcPath() string {
	p, err := exec.LookPath("runc")
	if err != nil {
		return "runc"
	}
	return p
}

// launch starts the containerd process. It dies with the test process
// (Pdeathsig; see testenv.RunDaemon for the locked thread).
func (c *Containerd) launch(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(c.bins.ContainerdDir, "containerd"), "--config", filepath.Join(c.Dir, "config.toml"))
	// The shim is found on PATH.
	cmd.Env = append(os.Environ(), "PATH="+c.bins.ContainerdDir+":"+os.Getenv("PATH"))
	return c.startProc(cmd)
}

// waitCRI waits (at most a minute) until the CRI answers Version.
func (c *Containerd) waitCRI(ctx context.Context) error {
	return c.CRI.waitCRI(ctx, "containerd", c.doneChan(), c.LogTail)
}

// Ctr runs ctr against this containerd, in the k8s.io namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bins.ContainerdDir, "ctr"), append([]string{"--address", c.Socket, "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Restart starts containerd again on the same dirs after Kill, and waits for
// its CRI.
func (c *Containerd) Restart(ctx context.Context) error {
	if err := c.launch(ctx); err != nil {
		return err
	}
	return c.waitCRI(ctx)
}

// Stop removes every sandbox through the CRI (so the CNI DELs run), stops
// containerd, and then removes whatever is still there: runc containers,
// shims, their sockets under /run/containerd/s/, mounts, and the dir. It is
// safe to call more than once.
func (c *Containerd) Stop() {
	if c.conn != nil && !c.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if list, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, sb := range list.Items {
				c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
				c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
			}
		}
		cancel()
	}
	c.terminate(15 * time.Second)
	c.closeConn()
	c.removeLeftovers()
	track(c, nil, false)
}

func (c *Containerd) removeLeftovers() {
	c.removeTasks()
	c.removeNetNS()
	unmountUnder(c.Dir)
	os.RemoveAll(c.Dir)
}

// shimSocket is the path of a shim's socket: containerd puts it at
// /run/containerd/s/<sha256(address/namespace/id)>, whatever its own dirs.
func shimSocket(p string) string {
	return filepath.Join("/run/containerd/s", fmt.Sprintf("%x", sha256.Sum256([]byte(p))))
}

func runcCmd(args ...string) *exec.Cmd { return exec.Command(runcPath(), args...) }

// shimPids are the containerd-shim-runc-v2 processes started by this
// containerd: their command line names its socket.
func (c *Containerd) shimPids() []int {
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
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == c.Socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			mp := unescapeMount(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				points = append(points, mp)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		unix.Unmount(p, unix.MNT_DETACH)
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Kind is "containerd".
func (c *Containerd) Kind() string { return "containerd" }
