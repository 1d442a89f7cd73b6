package crinode

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// legacyKubeletDir is where the kubelet makes its device-plugin socket
// whatever its --root-dir says; Stop removes what it made there.
const legacyKubeletDir = "/var/lib/kubelet"

// Kubelet is a running kubelet on a Node (containerd or CRI-O), registered
// with an API server as NodeName.
type Kubelet struct {
	Dir      string
	NodeName string

	cmd     *exec.Cmd
	done    chan struct{}
	logFile string
	// unlock releases the machine-wide kubelet lock (lockKubelet).
	unlock func()
	// madeLegacy is the first path under /var/lib/kubelet that did not
	// exist before the kubelet started (empty: it all did).
	madeLegacy string
}

// kubeletConfig is the KubeletConfiguration that lets a kubelet run inside a
// container here: cgroup v1 with cgroupfs and no QoS cgroups or allocatable
// enforcement, no swap check, no local storage isolation, eviction thresholds
// near zero (cadvisor cannot stat the root disk here), anonymous AlwaysAllow
// auth on 127.0.0.1, and everything in its own dir (its static pods'
// manifests too: StaticPodDir). Node status is reported every second, so that
// a NotReady shows quickly.
func (k *Kubelet) kubeletConfig(endpoint string, port, healthz int) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
evictionHard:
  memory.available: "1Ki"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
address: 127.0.0.1
port: ` + strconv.Itoa(port) + `
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ` + strconv.Itoa(healthz) + `
containerRuntimeEndpoint: unix://` + endpoint + `
podLogsDir: ` + filepath.Join(k.Dir, "pod-logs") + `
staticPodPath: ` + k.StaticPodDir() + `
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
syncFrequency: 5s
registerNode: true
`
}

// StartKubelet starts a kubelet on the runtime n, joining the API server of
// kubeconfig as nodeName, and returns once its healthz answers. Its dir is
// beside the runtime's. Its output goes to log, or to a file in its dir when
// log is nil. Both runtimes here run with cgroupfs, the kubelet's
// cgroupDriver.
func StartKubelet(ctx context.Context, bins Binaries, n Node, kubeconfig, nodeName string, log io.Writer) (*Kubelet, error) {
	if bins.Kubelet == "" {
		return nil, fmt.Errorf("%w: no kubelet (set MANIFOLD_KUBELET or run hack/build-node.sh)", ErrBinariesUnavailable)
	}
	dir, err := os.MkdirTemp(filepath.Dir(n.CRIClient().Dir), "manifold-kubelet-")
	if err != nil {
		return nil, err
	}
	k := &Kubelet{Dir: dir, NodeName: nodeName, logFile: filepath.Join(dir, "kubelet.log")}
	if k.unlock, err = lockKubelet(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for p := legacyKubeletDir + "/device-plugins/kubelet.sock"; p != "/var/lib"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err != nil {
			k.madeLegacy = p
		}
	}
	track(nil, k, true)
	if err := k.start(ctx, bins, n, kubeconfig, log); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) start(ctx context.Context, bins Binaries, n Node, kubeconfig string, log io.Writer) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	healthz, err := freePort()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(k.StaticPodDir(), 0o755); err != nil {
		return err
	}
	config := filepath.Join(k.Dir, "config.yaml")
	if err := os.WriteFile(config, []byte(k.kubeletConfig(n.CRIClient().Socket, port, healthz)), 0o644); err != nil {
		return err
	}
	k.cmd = exec.Command(bins.Kubelet, "--config", config, "--kubeconfig", kubeconfig,
		"--root-dir", k.RootDir(), "--cert-dir", filepath.Join(k.Dir, "pki"),
		"--hostname-override", k.NodeName, "--node-ip", "127.0.0.1", "-v", "2")
	if log == nil {
		f, err := os.Create(k.logFile)
		if err != nil {
			return err
		}
		defer f.Close()
		log = f
	}
	k.cmd.Stdout, k.cmd.Stderr = log, log
	done, err := testenv.StartTied(k.cmd, nil)
	k.done = done // nil if it did not start
	if err != nil {
		return fmt.Errorf("start kubelet: %w", err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(healthz) + "/healthz"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// Ready once healthz answers and the kubelet's server listens too: it
		// binds its port after healthz's, and exits if it cannot.
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
					conn.Close()
					return nil
				}
			}
		}
		select {
		case <-k.done:
			return fmt.Errorf("kubelet exited during start-up:\n%s", k.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet healthz did not answer within 2 minutes:\n%s", k.LogTail())
		}
	}
}

// RootDir is the kubelet's --root-dir: its PodResources socket is
// pod-resources/kubelet.sock there, and plugins (a DRA driver) register in
// its plugins_registry.
func (k *Kubelet) RootDir() string { return filepath.Join(k.Dir, "root") }

// StaticPodDir is the kubelet's staticPodPath: a pod manifest written there
// runs as a static pod, and the kubelet gives it a mirror pod in the API
// (named <pod>-<node>); removing the file stops the pod. Empty at the start.
func (k *Kubelet) StaticPodDir() string { return filepath.Join(k.Dir, "manifests") }

// PodLogsDir is where the kubelet keeps the containers' logs:
// <namespace>_<pod>_<uid>/<container>/<restart count>.log.
func (k *Kubelet) PodLogsDir() string { return filepath.Join(k.Dir, "pod-logs") }

// Kill ends the kubelet with SIGKILL, as a crash or a reboot would, and
// leaves its dir for Restart.
func (k *Kubelet) Kill() {
	if k.done == nil {
		return
	}
	select {
	case <-k.done:
	default:
		k.cmd.Process.Kill()
		<-k.done
	}
}

// Restart starts the kubelet again on the same dir after Kill, and waits for
// its healthz. Its log goes on in the same file.
func (k *Kubelet) Restart(ctx context.Context, bins Binaries, n Node, kubeconfig string) error {
	f, err := os.OpenFile(k.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return k.start(ctx, bins, n, kubeconfig, f)
}

// LogTail is the end of the kubelet's log, when it goes to its file.
func (k *Kubelet) LogTail() string {
	b, _ := os.ReadFile(k.logFile)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// Stop ends the kubelet (SIGTERM, SIGKILL after 15 s), unmounts its root
// dir (it bind-mounts it onto itself), removes its dir and what it made
// under /var/lib/kubelet. The pods' sandboxes stay in the runtime, whose
// Stop removes them. Safe to call more than once.
func (k *Kubelet) Stop() {
	if k.done != nil {
		select {
		case <-k.done:
		default:
			k.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-k.done:
			case <-time.After(15 * time.Second):
				k.cmd.Process.Kill()
				<-k.done
			}
		}
	}
	unmountUnder(k.Dir)
	os.RemoveAll(k.Dir)
	if k.madeLegacy != "" {
		unmountUnder(k.madeLegacy)
		os.RemoveAll(k.madeLegacy)
	}
	if k.unlock != nil {
		k.unlock()
		k.unlock = nil
	}
	track(nil, k, false)
}

// kubeletLock is held by the one kubelet that may run on this machine at a
// time: every kubelet makes /var/lib/kubelet/device-plugins/kubelet.sock
// whatever its --root-dir, so two (the e2e package's node and the cluster
// tier, run as parallel test binaries) would take it from each other.
const kubeletLock = "/run/manifold-e2e-kubelet.lock"

// lockKubelet waits, within ctx, for the machine-wide kubelet lock. The lock
// goes with the process, however it ends.
func lockKubelet(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(kubeletLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open kubelet lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", kubeletLock, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another test's kubelet to stop (%s): %w", kubeletLock, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// freePort picks an unused loopback port for the kubelet to listen on. It
// is chosen below the kernel's ephemeral range (32768-60999 by default),
// because the kubelet binds it only later: a port from that range (what
// listening on port 0 gives) may meanwhile become the local end of any
// outgoing connection on the node, and the kubelet then dies at start-up
// with "bind: address already in use", as it once did on the restart after
// a node reboot of the cluster tier.
func freePort() (int, error) {
	const lo, n = 20000, 12000
	var err error
	for range 200 {
		p := lo + rand.IntN(n)
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d: %w", lo, lo+n-1, err)
}
