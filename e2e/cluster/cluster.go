// Package cluster runs a one-node Kubernetes built from source, with no
// Docker and no kind, for manifold's cluster tier, its demo and its bench
// (issue 27): a real etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager on 127.0.0.1 (e2e/controlplane), and a node made of
// a runtime, containerd 2.x or CRI-O 1.35 with runc, and a kubelet
// (e2e/crinode) whose CNI dirs are the host's own /etc/cni/net.d and
// /opt/cni/bin, as on a real node.
//
// manifold gets onto that node only as an admin installs it: its image is
// imported into the node's runtime (never pulled from outside), and the DaemonSets of
// deployments/ are applied with kubectl. The only thing put on the node by
// hand is what the cluster's primary CNI would install there: its plugins in
// /opt/cni/bin (the reference plugins, as a distribution's
// containernetworking-plugins package puts them) and its conflist in
// /etc/cni/net.d.
//
// Start refuses a host whose /etc/cni/net.d or /opt/cni/bin hold files it did
// not make. It makes / rshared (the thick DaemonSet's HostToContainer mounts
// need it, as on a systemd node) and Stop puts back what was private. Stop
// removes everything the cluster made, also on failure.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// Options tune Start.
type Options struct {
	// TempDir is the parent of the cluster's scratch dir; empty means
	// os.TempDir().
	TempDir string
	// NodeName is the node's name; empty means a unique one.
	NodeName string
	// Handlers are extra runtime handlers with a CNI conf dir of their own
	// (crinode.Handler), for RuntimeClasses that bypass manifold; containerd
	// only.
	Handlers []crinode.Handler
	// Runtime is the node's runtime: Containerd or CRIO. Empty means
	// $MANIFOLD_CLUSTER_RUNTIME, and containerd when that is unset too.
	Runtime string
}

// The node's runtimes (Options.Runtime), as crinode.Node's Kind names them.
const (
	Containerd = "containerd"
	CRIO       = "crio"
)

// RuntimeEnv names the runtime of a cluster whose Options.Runtime is empty.
const RuntimeEnv = "MANIFOLD_CLUSTER_RUNTIME"

// RuntimeFromEnv is $MANIFOLD_CLUSTER_RUNTIME, Containerd when it is unset,
// or an error naming a value that is neither.
func RuntimeFromEnv() (string, error) {
	switch v := os.Getenv(RuntimeEnv); v {
	case "", Containerd:
		return Containerd, nil
	case CRIO:
		return CRIO, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", RuntimeEnv, v, Containerd, CRIO)
	}
}

// Cluster is a running one-node Kubernetes.
type Cluster struct {
	CP *controlplane.ControlPlane
	// Node is the node's runtime, a *crinode.Containerd or a *crinode.CRIO.
	Node     crinode.Node
	Kubelet  *crinode.Kubelet
	NodeName string
	// Dir is the scratch dir: the control plane's, the runtime's and the
	// kubelet's dirs are in it.
	Dir string

	bins     crinode.Binaries
	hostDirs *hostDirs
	// netnsBefore are the cni-* namespaces that were there before the
	// cluster started: not its leaks.
	netnsBefore map[string]bool
	restore     func()

	stopOnce sync.Once
}

// Start starts the control plane, the node's runtime and its kubelet, and
// waits for the node to register. The node is NotReady until a CNI config
// appears in /etc/cni/net.d. On error nothing is left.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Runtime == "" {
		if opts.Runtime, err = RuntimeFromEnv(); err != nil {
			return nil, err
		}
	}
	bins, err := crinode.FindBinaries()
	if err != nil {
		return nil, err
	}
	if bins.Kubelet == "" {
		return nil, fmt.Errorf("%w: no kubelet (set MANIFOLD_KUBELET, or unset MANIFOLD_CONTAINERD_DIR to build it)", crinode.ErrBinariesUnavailable)
	}
	var startNode func(context.Context, crinode.Options) (crinode.Node, error)
	switch opts.Runtime {
	case Containerd:
		startNode = func(ctx context.Context, o crinode.Options) (crinode.Node, error) { return crinode.Start(ctx, bins, o) }
	case CRIO:
		if len(opts.Handlers) > 0 {
			return nil, fmt.Errorf("cluster: runtime handlers with a CNI conf dir of their own are containerd's; CRI-O has none")
		}
		crio, err := crinode.FindCRIO()
		if err != nil {
			return nil, err
		}
		startNode = func(ctx context.Context, o crinode.Options) (crinode.Node, error) {
			return crinode.StartCRIO(ctx, crio, o)
		}
	default:
		return nil, fmt.Errorf("cluster: no runtime %q (want %q or %q)", opts.Runtime, Containerd, CRIO)
	}
	cpBins, err := controlplane.FindBinaries(ctx)
	if err != nil {
		return nil, err
	}
	hd, err := claimHostDirs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.TempDir, "mfc-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, NodeName: opts.NodeName, bins: bins, hostDirs: hd, netnsBefore: crinode.HostNetNSNames()}
	if c.NodeName == "" {
		c.NodeName = testenv.UniqueName("node-")
	}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.restore, err = shareRoot(); err != nil {
		return c, err
	}
	for _, d := range []string{ConfDir, BinDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
	}
	if c.CP, err = controlplane.Start(ctx, controlplane.Options{Binaries: cpBins, TempDir: dir, Controllers: true}); err != nil {
		return c, err
	}
	if err := c.CP.InstallCRD(ctx); err != nil {
		return c, err
	}
	node, err := startNode(ctx, crinode.Options{CNIBinDir: BinDir, CNIConfDir: ConfDir, TempDir: dir,
		HostNetNS: true, Handlers: opts.Handlers})
	if err != nil {
		return c, err
	}
	c.Node = node
	if c.Kubelet, err = crinode.StartKubelet(ctx, bins, c.Node, c.CP.KubeconfigPath, c.NodeName, nil); err != nil {
		return c, err
	}
	return c, c.waitNode(ctx)
}

// waitNode waits until the node object exists.
func (c *Cluster) waitNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s did not register: %w (last: %v)\nkubelet log:\n%s", c.NodeName, ctx.Err(), err, c.Kubelet.LogTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Clientset is an admin client of the cluster.
func (c *Cluster) Clientset() kubernetes.Interface { return c.CP.Clientset() }

// Kubectl runs kubectl as the admin, with stdin (may be empty), and returns
// its combined output.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.CP.Kubectl(ctx, stdin, args...)
}

// Reboot reboots the node: the runtime and the kubelet die with every pod's
// processes and network namespace, and start again (crinode.Node's Reboot).
// manifold's socket dir in /run is wiped too, as a reboot's tmpfs would be.
// The Device Info dir, /run/k8s.cni.cncf.io, is kept, unlike on a real
// reboot: so that a Device Info file of a dead sandbox is gone afterwards
// only when manifold's DEL of that sandbox removed it, which a test can then
// check (a runtime's restart without a reboot keeps the dir too).
func (c *Cluster) Reboot(ctx context.Context) error {
	c.Kubelet.Kill()
	c.Node.Reboot()
	for _, d := range []string{"/run/manifold"} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(d, e.Name()))
		}
	}
	if err := c.Node.Restart(ctx); err != nil {
		return err
	}
	return c.Kubelet.Restart(ctx, c.bins, c.Node, c.CP.KubeconfigPath)
}

// NodeReady is the node's Ready condition: its status and message.
func (c *Cluster) NodeReady(ctx context.Context) (bool, string, error) {
	n, err := c.Clientset().CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue, cond.Message, nil
		}
	}
	return false, "no Ready condition", nil
}

// LogTails is the end of every server's log, for a failure report.
func (c *Cluster) LogTails() string {
	var b strings.Builder
	if c.CP != nil {
		b.WriteString(c.CP.LogTails())
	}
	if c.Node != nil {
		fmt.Fprintf(&b, "\n--- %s:\n%s", c.Node.Kind(), c.Node.LogTail())
	}
	if c.Kubelet != nil {
		fmt.Fprintf(&b, "\n--- kubelet:\n%s", c.Kubelet.LogTail())
	}
	return b.String()
}

// Stop stops the kubelet, then the runtime (which removes every sandbox
// through the CRI, so manifold's DELs run while it is still installed), then
// the control plane; empties the host's CNI dirs, removes the node dirs it
// made and what the primary's IPAM and the runtime's libcni cache kept of this
// cluster, puts back the mount propagation and removes its dir. Safe to call
// more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.Kubelet != nil {
			c.Kubelet.Stop()
		}
		if c.Node != nil {
			c.Node.Stop()
		}
		if c.CP != nil {
			c.CP.Stop()
		}
		if c.hostDirs != nil {
			if errs := c.hostDirs.release(); len(errs) > 0 {
				fmt.Fprintf(os.Stderr, "cluster: clean-up: %v\n", errors.Join(errs...))
			}
		}
		removeNetworkState()
		if c.restore != nil {
			c.restore()
		}
		os.RemoveAll(c.Dir)
	})
}
