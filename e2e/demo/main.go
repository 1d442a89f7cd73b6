// Command demo shows manifold doing its whole job on a local control plane:
// a real etcd and kube-apiserver on 127.0.0.1, two NetworkAttachmentDefinitions,
// a pod that asks for them, and a network namespace for its sandbox. It runs
// ADD through libcni as containerd would, prints what the pod got (interfaces,
// routes, the CNI result, the network-status annotation and the events), then
// runs DEL and shows that nothing is left. Everything it creates is removed at
// the end, also on error or Ctrl-C.
//
// Run it with `make demo` (as root). It finds manifold and the plugins through
// MANIFOLD_BIN and MANIFOLD_PLUGINS_DIR, or builds them, like the tests do.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/netconf"
)

const (
	podNamespace = "demo"
	podName      = "demo-pod"
	networksKey  = "k8s.v1.cni.cncf.io/networks"
	statusKey    = "k8s.v1.cni.cncf.io/network-status"
	clusterNet   = "demo-cluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the demo creates network namespaces, links and servers: run it as root (make demo)")
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
	d := &demo{}
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
	return 0
}

// demo holds what the demo made, so it can be shown and removed.
type demo struct {
	undo    []step
	dir     string
	binDir  string
	cniDir  string
	confDir string
	leases  string
	logFile string
	netns   string // name under /run/netns
	parent  string // veth end used as the macvlan master
	bridge  string
	cp      *controlplane.ControlPlane
	cni     *libcni.CNIConfig
	conf    *libcni.NetworkConfigList
	rt      *libcni.RuntimeConf
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
			fmt.Printf("  %-45s FAILED: %v\n", s.what, err)
			continue
		}
		fmt.Printf("  %-45s done\n", s.what)
	}
}

func (d *demo) run(ctx context.Context) error {
	heading("manifold demo")
	fmt.Println("A real etcd and kube-apiserver on 127.0.0.1, the NAD CRD, two networks, one pod,")
	fmt.Println("and manifold called through libcni exactly as containerd calls it.")

	if err := d.setupNode(); err != nil {
		return err
	}
	if err := d.startControlPlane(ctx); err != nil {
		return err
	}
	if err := d.createObjects(ctx); err != nil {
		return err
	}
	if err := d.add(ctx); err != nil {
		return err
	}
	if err := d.show(ctx); err != nil {
		return err
	}
	if err := d.del(ctx); err != nil {
		return err
	}
	return d.thick(ctx)
}

// setupNode makes what a node has: a bin dir with manifold and the plugins,
// manifold's directories, the cluster network's config, a veth pair whose end
// is the macvlan master, and the pod sandbox's network namespace.
func (d *demo) setupNode() error {
	heading("1. The node")
	dir, err := os.MkdirTemp("", "manifold-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	d.later("remove "+dir, func() error { return os.RemoveAll(dir) })
	d.binDir = filepath.Join(dir, "bin")
	d.cniDir = filepath.Join(dir, "cni")
	d.confDir = filepath.Join(dir, "net.d")
	d.leases = filepath.Join(dir, "leases")
	d.logFile = filepath.Join(dir, "manifold.log")
	for _, p := range []string{d.binDir, d.cniDir, d.confDir, d.leases, filepath.Join(dir, "tuning"), filepath.Join(dir, "libcni")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}

	plugins, err := testenv.FindPlugins()
	if err != nil {
		return err
	}
	manifold, err := testenv.FindManifold(dir)
	if err != nil {
		return err
	}
	if err := testenv.LinkBinDir(d.binDir, plugins, manifold); err != nil {
		return fmt.Errorf("fill bin dir: %w", err)
	}
	fmt.Printf("  manifold:        %s\n  plugins:         %s\n", manifold, plugins)

	d.bridge = testenv.UniqueName("mfdbr")
	cluster := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","subnet":"10.250.0.0/24","dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}}]}`, clusterNet, d.bridge, d.leases)
	if err := os.WriteFile(filepath.Join(d.confDir, "10-cluster.conflist"), []byte(cluster), 0o644); err != nil {
		return err
	}
	d.later("delete bridge "+d.bridge, func() error { return deleteLink(d.bridge) })
	fmt.Printf("  cluster network: %q (bridge %s, 10.250.0.0/24), a config in %s\n", clusterNet, d.bridge, d.confDir)

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
	fmt.Printf("  macvlan master:  %s (one end of a veth pair)\n", d.parent)

	d.netns = testenv.UniqueName("mfdemo-ns-")
	if out, err := exec.Command("ip", "netns", "add", d.netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %w: %s", d.netns, err, out)
	}
	d.later("delete network namespace "+d.netns, func() error {
		if out, err := exec.Command("ip", "netns", "del", d.netns).CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	fmt.Printf("  pod sandbox:     network namespace %s\n", d.netns)
	return nil
}

func (d *demo) startControlPlane(ctx context.Context) error {
	heading("2. The control plane")
	start := time.Now()
	bins, err := controlplane.FindBinaries(ctx)
	if err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Binaries: bins})
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

// createObjects makes the namespace, the two NADs and the annotated pod.
func (d *demo) createObjects(ctx context.Context) error {
	heading("3. NetworkAttachmentDefinitions and the pod")
	cs := d.cp.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}, metav1.CreateOptions{}); err != nil {
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

	networks := `[{"name":"macvlan-net"},{"name":"static-net","interface":"data0","ips":["10.250.2.10/24"],"mac":"02:00:5e:10:00:0a"}]`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: podNamespace, Annotations: map[string]string{networksKey: networks}},
		Spec: corev1.PodSpec{
			NodeName:   "demo-node",
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	created, err := cs.CoreV1().Pods(podNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod: %w", err)
	}
	fmt.Printf("  Pod %s/%s (uid %s), annotated\n    %s:\n%s\n", podNamespace, podName, created.UID, networksKey, indent(pretty([]byte(networks)), 4))

	d.conf, err = libcni.NetworkConfFromBytes(d.manifoldConf())
	if err != nil {
		return fmt.Errorf("parse manifold's config: %w", err)
	}
	d.cni = libcni.NewCNIConfigWithCacheDir([]string{d.binDir}, filepath.Join(d.dir, "libcni"), nil)
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	containerID := hex.EncodeToString(id)
	d.rt = &libcni.RuntimeConf{
		ContainerID: containerID,
		NetNS:       "/run/netns/" + d.netns,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", podNamespace},
			{"K8S_POD_NAME", podName},
			{"K8S_POD_INFRA_CONTAINER_ID", containerID},
			{"K8S_POD_UID", string(created.UID)},
		},
		// As containerd and CRI-O do for a plugin that declares the capability:
		// the pod's annotations, as the kubelet gave them for the sandbox.
		CapabilityArgs: map[string]any{netconf.CapPodAnnotations: testenv.KubeletAnnotations(created.Annotations, time.Now())},
	}
	// If the demo stops half-way, DEL what ADD may have attached.
	d.later("DEL again (a no-op unless the demo stopped early)", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return d.cni.DelNetworkList(ctx, d.conf, d.rt)
	})
	return nil
}

func (d *demo) manifoldConf() []byte {
	b, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "manifold",
		"plugins": []any{map[string]any{
			"type":           "manifold",
			"kubeconfig":     d.cp.KubeconfigPath,
			"clusterNetwork": clusterNet,
			"confDir":        d.confDir,
			"cniDir":         d.cniDir,
			"binDir":         d.binDir,
			"logFile":        d.logFile,
			"logLevel":       "verbose",
			"capabilities":   map[string]bool{netconf.CapPodAnnotations: true},
		}},
	})
	return b
}

func (d *demo) add(ctx context.Context) error {
	heading("4. ADD, as the container runtime runs it")
	fmt.Printf("  manifold's config (the node's only CNI config):\n%s\n", indent(pretty(d.manifoldConf()), 4))
	fmt.Printf("  CNI_COMMAND=ADD CNI_IFNAME=eth0 CNI_NETNS=%s\n  CNI_ARGS=%s\n", d.rt.NetNS, cniArgs(d.rt.Args))
	fmt.Printf("  runtimeConfig[%q]: the pod's annotations, so manifold need not read the pod\n", netconf.CapPodAnnotations)
	start := time.Now()
	res, err := d.cni.AddNetworkList(ctx, d.conf, d.rt)
	if err != nil {
		return fmt.Errorf("ADD: %w", err)
	}
	fmt.Printf("  ADD succeeded in %s. The result the runtime gets (the default network's):\n", time.Since(start).Round(time.Millisecond))
	b, _ := json.Marshal(res)
	fmt.Println(indent(pretty(b), 4))
	return nil
}

func (d *demo) show(ctx context.Context) error {
	heading("5. Inside the pod")
	fmt.Printf("  $ ip -n %s -br addr\n%s", d.netns, indent(ipOut(d.netns, "-br", "addr"), 4))
	fmt.Printf("  $ ip -n %s route\n%s", d.netns, indent(ipOut(d.netns, "route"), 4))

	heading("6. The pod's " + statusKey + " annotation")
	pod, err := d.cp.Clientset().CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	st, ok := pod.Annotations[statusKey]
	if !ok {
		return errors.New("the pod has no network-status annotation")
	}
	fmt.Println(indent(pretty([]byte(st)), 2))

	heading("7. The pod's events")
	evs, err := d.cp.Clientset().CoreV1().Events(podNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + podName})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	fmt.Printf("  %-8s %-16s %-10s %s\n", "TYPE", "REASON", "FROM", "MESSAGE")
	for _, ev := range evs.Items {
		fmt.Printf("  %-8s %-16s %-10s %s\n", ev.Type, ev.Reason, ev.Source.Component, ev.Message)
	}
	return nil
}

func (d *demo) del(ctx context.Context) error {
	heading("8. DEL")
	fmt.Printf("  CNI_COMMAND=DEL CNI_IFNAME=eth0 CNI_NETNS=%s\n", d.rt.NetNS)
	start := time.Now()
	if err := d.cni.DelNetworkList(ctx, d.conf, d.rt); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	fmt.Printf("  DEL succeeded in %s. What is left:\n", time.Since(start).Round(time.Millisecond))
	fmt.Printf("  $ ip -n %s -br addr\n%s", d.netns, indent(ipOut(d.netns, "-br", "addr"), 4))
	fmt.Printf("  host-local leases in %s: %s\n", d.leases, orNone(files(d.leases, true)))
	fmt.Printf("  manifold's records in %s: %s\n", d.cniDir, orNone(files(d.cniDir, false)))
	fmt.Printf("  ports on bridge %s: %s\n", d.bridge, orNone(bridgePorts(d.bridge)))
	return nil
}

// thick attaches the same pod once more in thick mode: the runtime runs
// manifold-shim, which passes the call to a manifold daemon.
func (d *demo) thick(ctx context.Context) error {
	heading("9. The same pod in thick mode (docs/thick-mode.md)")
	shim, err := testenv.FindShim(d.dir)
	if err != nil {
		return err
	}
	if err := os.Symlink(shim, filepath.Join(d.binDir, "manifold-shim")); err != nil {
		return err
	}
	socket := filepath.Join(d.dir, "run", "manifold.sock")
	daemonLog, err := os.Create(filepath.Join(d.dir, "daemon.log"))
	if err != nil {
		return err
	}
	defer daemonLog.Close()
	daemon, err := testenv.RunDaemon(filepath.Join(d.binDir, "manifold"), socket, daemonLog)
	if err != nil {
		return err
	}
	d.later("stop the manifold daemon", daemon.Terminate)
	fmt.Printf("  $ manifold daemon --socket %s   (running, pid %d)\n", socket, daemon.Pid())

	var list map[string]any
	_ = json.Unmarshal(d.manifoldConf(), &list)
	plugin := list["plugins"].([]any)[0].(map[string]any)
	plugin["type"], plugin["daemonSocket"] = "manifold-shim", socket
	raw, _ := json.Marshal(list)
	conf, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		return err
	}
	fmt.Printf("  the same config, with \"type\": \"manifold-shim\" and \"daemonSocket\": %q\n", socket)

	rt := *d.rt
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	rt.ContainerID = hex.EncodeToString(id)
	rt.Args = append([][2]string(nil), d.rt.Args...)
	for i := range rt.Args {
		if rt.Args[i][0] == "K8S_POD_INFRA_CONTAINER_ID" {
			rt.Args[i][1] = rt.ContainerID
		}
	}
	pods := d.cp.Clientset().CoreV1().Pods(podNamespace)
	before, err := pods.Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.later("DEL the thick-mode sandbox again (a no-op unless the demo stopped early)", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return d.cni.DelNetworkList(ctx, conf, &rt)
	})
	start := time.Now()
	if _, err := d.cni.AddNetworkList(ctx, conf, &rt); err != nil {
		return fmt.Errorf("ADD in thick mode: %w", err)
	}
	fmt.Printf("  ADD through the daemon succeeded in %s (one run; make bench compares the modes)\n", time.Since(start).Round(time.Millisecond))
	fmt.Printf("  $ ip -n %s -br addr\n%s", d.netns, indent(ipOut(d.netns, "-br", "addr"), 4))
	// The daemon writes the status just after it answers.
	var st string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pod, err := pods.Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st = pod.Annotations[statusKey]; st != "" && st != before.Annotations[statusKey] {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the daemon did not write the new network-status within 10s")
		}
	}
	fmt.Printf("  the new %s, written by the daemon just after it answered:\n%s\n", statusKey, indent(pretty([]byte(st)), 4))
	start = time.Now()
	if err := d.cni.DelNetworkList(ctx, conf, &rt); err != nil {
		return fmt.Errorf("DEL in thick mode: %w", err)
	}
	fmt.Printf("  DEL through the daemon succeeded in %s. Left: interfaces %s; leases %s; records %s\n",
		time.Since(start).Round(time.Millisecond), orNone(podIfaces(d.netns)), orNone(files(d.leases, true)), orNone(files(d.cniDir, false)))
	return nil
}

// podIfaces lists the pod's interfaces other than lo.
func podIfaces(netns string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(ipOut(netns, "-br", "link")), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "lo" {
			out = append(out, f[0])
		}
	}
	return out
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

func cniArgs(args [][2]string) string {
	parts := make([]string, len(args))
	for i, kv := range args {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ";")
}

func ipOut(netns string, args ...string) string {
	out, err := exec.Command("ip", append([]string{"-n", netns}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(ip failed: %v) %s", err, out)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return "(none)\n"
	}
	return string(out)
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
