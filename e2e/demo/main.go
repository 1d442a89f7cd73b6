// Command demo shows manifold on a real node, as a user meets it: a real etcd
// and kube-apiserver on 127.0.0.1, containerd 2.x with runc, and a kubelet
// that joins the API server. Pods are created through the API, as kubectl
// would; the kubelet runs them through containerd, which calls manifold, which
// calls the delegates. The demo prints what `kubectl describe pod` would show
// (the network-status annotation and the events), what is inside the pod, and
// what is left after the pod is deleted: first in thin mode (manifold is the
// CNI plugin), then in daemon mode (manifold-shim and `manifold daemon`).
// Everything it creates is removed at the end, also on error or Ctrl-C.
//
// Run it with `make demo` (as root). It finds its binaries through the
// variables the tests read (MANIFOLD_BIN, MANIFOLD_SHIM, MANIFOLD_PLUGINS_DIR,
// the control plane's MANIFOLD_KUBE_APISERVER, MANIFOLD_ETCD, … and the node's
// MANIFOLD_CONTAINERD_DIR and MANIFOLD_KUBELET; e2e/README.md lists them), or
// builds them (minutes when cold; progress on stderr), like the tests do.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
)

const (
	podNamespace = "demo"
	networksKey  = "k8s.v1.cni.cncf.io/networks"
	statusKey    = "k8s.v1.cni.cncf.io/network-status"
	clusterNet   = "demo-cluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the demo runs containerd, a kubelet and network namespaces: run it as root (make demo)")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// A second Ctrl-C during the clean-up kills the demo outright; the
		// servers die with it (Pdeathsig).
		stop()
	}()
	d := &demo{started: time.Now()}
	err := d.run(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		// The error is only the echo of the interruption; its first line says
		// where it struck.
		first, _, _ := strings.Cut(err.Error(), "\n")
		fmt.Fprintf(os.Stderr, "\ninterrupted (%s)\n", first)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		d.showLog()
	}
	d.cleanup()
	if err != nil {
		return 1
	}
	fmt.Printf("\nThe demo took %s in all.\n", time.Since(d.started).Round(time.Second))
	return 0
}

// demo holds what the demo made, so it can be shown and removed.
type demo struct {
	started  time.Time
	undo     []step
	dir      string
	manifold string
	shim     string
	plugins  string
	bins     crinode.Binaries
	cniDir   string
	netDir   string
	leases   string
	logFile  string
	parent   string // veth end used as the macvlan master
	bridge   string
	cp       *controlplane.ControlPlane
}

type step struct {
	what string
	fn   func() error
}

// later registers a clean-up step; they run in reverse order.
func (d *demo) later(what string, fn func() error) {
	d.undo = append(d.undo, step{what, fn})
}

func (d *demo) cleanup() {
	heading("Cleaning up")
	for i := len(d.undo) - 1; i >= 0; i-- {
		s := d.undo[i]
		if err := s.fn(); err != nil {
			fmt.Printf("  %-55s FAILED: %v\n", s.what, err)
			continue
		}
		fmt.Printf("  %-55s done\n", s.what)
	}
}

func (d *demo) run(ctx context.Context) error {
	heading("manifold demo: a real node")
	fmt.Println("A real etcd and kube-apiserver on 127.0.0.1, containerd 2.x with runc, and a kubelet.")
	fmt.Println("Pods are created through the API; the kubelet runs them through containerd, which calls manifold.")

	if err := d.binaries(ctx); err != nil {
		return err
	}
	if err := d.startControlPlane(ctx); err != nil {
		return err
	}
	if err := d.networks(ctx); err != nil {
		return err
	}
	if err := d.mode(ctx, "3. Thin mode: manifold is the node's CNI plugin", false); err != nil {
		return err
	}
	return d.mode(ctx, "4. Daemon mode: manifold-shim and `manifold daemon` beside the kubelet", true)
}

// binaries finds (or builds) everything the demo runs.
func (d *demo) binaries(ctx context.Context) error {
	heading("0. The binaries")
	start := time.Now()
	dir, err := os.MkdirTemp("", "manifold-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	d.later("remove "+dir, func() error { return os.RemoveAll(dir) })
	if d.plugins, err = testenv.FindPlugins(); err != nil {
		return err
	}
	if d.manifold, err = testenv.FindManifold(dir); err != nil {
		return err
	}
	if d.shim, err = testenv.FindShim(dir); err != nil {
		return err
	}
	if d.bins, err = crinode.FindBinaries(); err != nil {
		return err
	}
	if d.bins.Kubelet == "" {
		return errors.New("no kubelet: set MANIFOLD_KUBELET, or unset MANIFOLD_CONTAINERD_DIR to build both")
	}
	fmt.Printf("  manifold:      %s\n  manifold-shim: %s\n  CNI plugins:   %s\n  containerd:    %s\n  kubelet:       %s\n  runc:          from PATH\n",
		d.manifold, d.shim, d.plugins, d.bins.ContainerdDir, d.bins.Kubelet)
	fmt.Printf("  (found or built in %s)\n", time.Since(start).Round(time.Second))
	return nil
}

func (d *demo) startControlPlane(ctx context.Context) error {
	heading("1. The control plane")
	start := time.Now()
	bins, err := controlplane.FindBinaries(ctx)
	if err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Binaries: bins, TempDir: d.dir})
	if err != nil {
		return err
	}
	d.cp = cp
	d.later("stop kube-apiserver and etcd", func() error { cp.Stop(); return nil })
	if err := cp.InstallCRD(ctx); err != nil {
		return err
	}
	fmt.Printf("  kube-apiserver %s and etcd %s up in %s\n", cp.URL, cp.EtcdURL, time.Since(start).Round(time.Millisecond))
	fmt.Printf("  CRD %s installed\n", controlplane.NADCRDName)
	return nil
}

// networks makes the node's default network (a bridge conflist file), a veth
// pair whose end is the macvlan master, and two NADs.
func (d *demo) networks(ctx context.Context) error {
	heading("2. The networks")
	d.cniDir = filepath.Join(d.dir, "cni")
	d.netDir = filepath.Join(d.dir, "manifold-net.d")
	d.leases = filepath.Join(d.dir, "leases")
	d.logFile = filepath.Join(d.dir, "manifold.log")
	for _, p := range []string{d.cniDir, d.netDir, d.leases, filepath.Join(d.dir, "tuning")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	d.bridge = testenv.UniqueName("mfdbr")
	cluster := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","subnet":"10.250.0.0/24","dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}}]}`, clusterNet, d.bridge, d.leases)
	if err := os.WriteFile(filepath.Join(d.netDir, "10-cluster.conflist"), []byte(cluster), 0o644); err != nil {
		return err
	}
	d.later("delete bridge "+d.bridge, func() error { return deleteLink(d.bridge) })
	fmt.Printf("  default network %q: bridge %s, 10.250.0.0/24, a conflist in %s\n", clusterNet, d.bridge, d.netDir)

	d.parent = testenv.UniqueName("mfdemo")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: d.parent}, PeerName: d.parent + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", d.parent, err)
	}
	d.later("delete veth "+d.parent, func() error { return deleteLink(d.parent) })
	for _, n := range []string{d.parent, veth.PeerName} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("set %s up: %w", n, err)
		}
	}
	fmt.Printf("  macvlan master: %s (one end of a veth pair)\n", d.parent)

	if _, err := d.cp.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	nads := []struct{ name, config string }{
		{"macvlan-net", fmt.Sprintf(`{"cniVersion":"1.0.0","type":"macvlan","master":%q,"mode":"bridge",
			"ipam":{"type":"host-local","subnet":"10.250.1.0/24","dataDir":%q}}`, d.parent, d.leases)},
		{"static-net", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"static-net","plugins":[
			{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"static"},"capabilities":{"ips":true}},
			{"type":"tuning","capabilities":{"mac":true},"dataDir":%q}]}`, d.parent, filepath.Join(d.dir, "tuning"))},
	}
	for _, n := range nads {
		obj, err := nadv1.New(podNamespace, n.name, n.config).ToUnstructured()
		if err != nil {
			return err
		}
		if _, err := d.cp.Dynamic().Resource(controlplane.NADResource).Namespace(podNamespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NAD %s: %w", n.name, err)
		}
		fmt.Printf("  NetworkAttachmentDefinition %s/%s:\n%s\n", podNamespace, n.name, indent(pretty([]byte(n.config)), 4))
	}
	return nil
}

// manifoldConf is manifold's conflist as the node's CNI config: cniVersion
// 1.1.0 (containerd sends STATUS only then) and the pod-annotations
// capability, so that manifold need not read the pod.
func (d *demo) manifoldConf(binDir, daemonSocket string) (conf []byte, plugin map[string]any) {
	plugin = map[string]any{
		"type":           "manifold",
		"kubeconfig":     d.cp.KubeconfigPath,
		"clusterNetwork": clusterNet,
		"confDir":        d.netDir,
		"cniDir":         d.cniDir,
		"binDir":         binDir,
		"logFile":        d.logFile,
		"logLevel":       "verbose",
		"capabilities":   map[string]bool{"io.kubernetes.cri.pod-annotations": true},
	}
	if daemonSocket != "" {
		plugin["type"], plugin["daemonSocket"] = "manifold-shim", daemonSocket
	}
	conf, _ = json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "manifold", "plugins": []any{plugin}})
	return conf, plugin
}

// showLog prints the end of manifold's log, to explain a failure.
func (d *demo) showLog() {
	b, err := os.ReadFile(d.logFile)
	if err != nil || len(b) == 0 {
		return
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	fmt.Fprintf(os.Stderr, "\nmanifold's log (%s), last lines:\n%s\n", d.logFile, b)
}

func heading(s string) {
	fmt.Printf("\n=== %s %s\n", s, strings.Repeat("=", max(0, 72-len(s))))
}

func pretty(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = pad + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// files lists the files under dir; leases=true leaves out host-local's lock
// and last-reserved markers, which are not leases.
func files(dir string, leases bool) []string {
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		base := filepath.Base(p)
		if leases && (base == "lock" || strings.HasPrefix(base, "last_reserved_ip")) {
			return nil
		}
		out = append(out, strings.TrimPrefix(p, dir+"/"))
		return nil
	})
	return out
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}

func bridgePorts(bridge string) []string {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return []string{"(list links: " + err.Error() + ")"}
	}
	var out []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}
