package e2e

// The runtime tier's node (issues 23 and 35): a throwaway containerd 2.x or
// CRI-O 1.35, both with runc (e2e/crinode), whose CNI calls manifold, in thin
// mode (manifold in the CNI bin dir) or daemon mode (manifold-shim and
// `manifold daemon`), driven over the CRI gRPC API as the kubelet drives it. manifold's config is the
// env's (the shared API server, the bridge default network) plus a static
// second network (net1) and a readiness file.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// The runtimes of the tier: crinode.Node's kinds.
const (
	containerdKind = "containerd"
	crioKind       = "crio"
)

// criEnv is an env whose runtime is a real containerd or CRI-O.
type criEnv struct {
	*env
	kind       string
	daemonMode bool
	node       crinode.Node
	// plugin is manifold's plugin config as written to the CRI conf dir;
	// confList is that whole conflist, binDir the runtime's CNI bin dir.
	plugin    map[string]any
	confList  []byte
	binDir    string
	readyFile string
	net1      subnet
	net1Br    string
	socket    string
	daemon    *daemonRef
	daemonLog *testenv.SyncBuffer
}

// nodeBinaries returns the node's programs, skipping the test when they
// cannot be had unless privileged tests are required.
func nodeBinaries(t *testing.T) crinode.Binaries {
	t.Helper()
	testenv.RequirePrivileged(t)
	bins, err := crinode.FindBinaries()
	if err != nil {
		if errors.Is(err, crinode.ErrBinariesUnavailable) && os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return bins
}

// crioBinaries returns CRI-O's programs, skipping the test as nodeBinaries
// does.
func crioBinaries(t *testing.T) crinode.CRIOBinaries {
	t.Helper()
	testenv.RequirePrivileged(t)
	bins, err := crinode.FindCRIO()
	if err != nil {
		if errors.Is(err, crinode.ErrBinariesUnavailable) && os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return bins
}

// newCRIEnv makes the node, of runtime kind (containerdKind or crioKind),
// on the control plane cp.
func newCRIEnv(t *testing.T, kind string, daemonMode bool, cp *controlplane.ControlPlane) *criEnv {
	t.Helper()
	var start func(context.Context, crinode.Options) (crinode.Node, error)
	switch kind {
	case containerdKind:
		bins := nodeBinaries(t)
		start = func(ctx context.Context, o crinode.Options) (crinode.Node, error) { return crinode.Start(ctx, bins, o) }
	case crioKind:
		bins := crioBinaries(t)
		start = func(ctx context.Context, o crinode.Options) (crinode.Node, error) {
			return crinode.StartCRIO(ctx, bins, o)
		}
	default:
		t.Fatalf("no runtime %q", kind)
	}
	e := &criEnv{env: newEnvOn(t, cp), kind: kind, daemonMode: daemonMode, net1: nextSubnet(), net1Br: testenv.UniqueName("mfcri")}
	tmp := t.TempDir()
	t.Cleanup(func() { testenv.DeleteLink(e.net1Br) })
	if kind == crioKind {
		// CRI-O CHECKs each sandbox right after its ADD and fails it when
		// the CHECK fails. The bridge plugin's CHECK compares the bridge's
		// MAC with the one in its ADD result, and the kernel moves a bridge's
		// MAC to its lowest port's until one is set: with sandboxes made at
		// once, net1's CHECKs failed with "Bridge interface ... Mac doesn't
		// match". The bridge is made here with its own MAC, as a node's
		// bridge that must pass CHECK needs (docs/runtimes.md).
		mac := make([]byte, 6)
		rand.Read(mac)
		mac[0] = 0x02
		if out, err := exec.Command("ip", "link", "add", e.net1Br, "address", net.HardwareAddr(mac).String(), "type", "bridge").CombinedOutput(); err != nil {
			t.Fatalf("ip link add %s: %v: %s", e.net1Br, err, out)
		}
	}
	net1Path := filepath.Join(tmp, "net1.conflist")
	e.writeFile(net1Path, fmt.Sprintf(`{"cniVersion":"1.0.0","name":"e2e-net1","plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, e.net1Br, e.net1, e.leaseDir))
	e.readyFile = filepath.Join(tmp, "ready")
	e.writeFile(e.readyFile, "")
	extra := map[string]any{"defaultNetworks": []string{net1Path}, "readinessindicatorfile": e.readyFile}
	binDir := e.rt.BinDir
	if daemonMode {
		binDir = testenv.ThickBinDir(t, true)
		e.socket = filepath.Join(tmp, "run", "manifold.sock")
		extra["binDir"] = binDir
		extra["daemonSocket"] = e.socket
	}
	var list map[string]any
	if err := json.Unmarshal(e.manifoldConf(extra).Bytes, &list); err != nil {
		t.Fatal(err)
	}
	// STATUS (and CRI-O's GC) is called only for a 1.1.0 conflist.
	list["cniVersion"] = "1.1.0"
	if kind == crioKind {
		// CRI-O's GC at start DELs every attachment in libcni's cache
		// (the host's /var/lib/cni: CRI-O has no setting for it) of the
		// network's name that it does not know: the name must be this
		// env's alone, or it would DEL the sandboxes of other tests.
		list["name"] = testenv.UniqueName("mfcrio-")
	}
	e.plugin = list["plugins"].([]any)[0].(map[string]any)
	if daemonMode {
		e.plugin["type"] = "manifold-shim"
		e.daemonLog = &testenv.SyncBuffer{}
		e.daemon = &daemonRef{}
		e.startDaemon()
		t.Cleanup(func() {
			if e.daemon.d != nil {
				e.daemon.d.Stop(t)
			}
			if t.Failed() {
				t.Logf("daemon output:\n%s", e.daemonLog)
			}
		})
	}
	confDir := filepath.Join(tmp, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	e.writeFile(filepath.Join(confDir, "00-manifold.conflist"), string(b))
	e.confList, e.binDir = b, binDir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := start(ctx, crinode.Options{CNIBinDir: binDir, CNIConfDir: confDir, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	e.node = node
	// Registered after the daemon's, so it runs first: the sandboxes are
	// removed through the CRI while the daemon still serves.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", kind, node.LogTail())
		}
		node.Stop()
	})
	e.waitNetworkReady(true)
	return e
}

// startDaemon starts `manifold daemon` with the node-path flags that match
// the config.
func (e *criEnv) startDaemon() {
	e.t.Helper()
	d, err := testenv.RunDaemon(testenv.Manifold(e.t), e.socket, e.daemonLog, testenv.DaemonFlags(e.plugin)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.daemon.d = d
}

// daemonRef is the running daemon, shared by an env and its subtests' envs.
type daemonRef struct{ d *testenv.Daemon }

func (e *criEnv) sub(t *testing.T) *criEnv {
	c := *e
	c.env = e.env.sub(t)
	return &c
}

// waitNetworkReady polls the CRI Status (each call is a STATUS) until
// NetworkReady is want, for at most 30 s, and returns the condition's message.
func (e *criEnv) waitNetworkReady(want bool) string {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, _, msg, err := e.node.NetworkReady(e.ctx())
		if err == nil && ready == want {
			return msg
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("NetworkReady = %v (%q, err %v) after 30s, want %v", ready, msg, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// criSandbox is a sandbox that the runtime runs for a pod of the API.
type criSandbox struct {
	id  string
	cfg *runtimeapi.PodSandboxConfig
	pod *corev1.Pod
}

// run is RunPodSandbox for the pod. With annotations, the sandbox carries the
// pod's annotations as the kubelet gives them, and the runtime passes them to
// manifold; without, containerd passes null and CRI-O {}.
func (e *criEnv) run(p *corev1.Pod, annotations bool) (*criSandbox, error) {
	var annots map[string]string
	if annotations {
		annots = testenv.KubeletAnnotations(p.Annotations, time.Now())
	}
	cfg := e.node.SandboxConfig(p.Namespace, p.Name, string(p.UID), annots)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := e.node.RunSandbox(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &criSandbox{id: id, cfg: cfg, pod: p}, nil
}

func (e *criEnv) mustRun(p *corev1.Pod, annotations bool) *criSandbox {
	e.t.Helper()
	sb, err := e.run(p, annotations)
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s/%s: %v", p.Namespace, p.Name, err)
	}
	return sb
}

// stopRemove stops and removes the sandbox: two DELs, both must succeed.
func (e *criEnv) stopRemove(sb *criSandbox) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.node.StopRemove(ctx, sb.id); err != nil {
		e.t.Fatalf("sandbox %s: %v", sb.id[:12], err)
	}
}

// netnsLinks lists the links in the sandbox's netns.
func (e *criEnv) netnsLinks(sb *criSandbox) []string {
	e.t.Helper()
	netns := e.sandboxNetNS(sb.id)
	defer netns.Close()
	return linkNames(e.t, netns)
}

// sandboxNetNS opens the netns of sandbox id; the caller closes it.
func (e *criEnv) sandboxNetNS(id string) ns.NetNS {
	e.t.Helper()
	path, err := e.node.SandboxNetNS(e.ctx(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	netns, err := ns.GetNS(path)
	if err != nil {
		e.t.Fatal(err)
	}
	return netns
}

// checkGone checks that nothing of the sandbox is left on the node: no
// host-local lease, no record, lock or cache file in cniDir, no port on
// either bridge.
func (e *criEnv) checkGone(id string) {
	t := e.t
	t.Helper()
	if got := filesMentioning(t, e.leaseDir, id, true); len(got) != 0 {
		t.Errorf("host-local leases of sandbox %s = %v, want none", id[:12], got)
	}
	if got := filesMentioning(t, e.cniDir, id, false); len(got) != 0 {
		t.Errorf("files of sandbox %s left in cniDir = %v, want none", id[:12], got)
	}
}

// statusIPs reads the pod's network-status and maps each entry's interface
// to its first IP. It LISTs the pod rather than GETting it, so that the
// API server's pod GET count is manifold's alone.
func (e *criEnv) statusIPs(p *corev1.Pod) (ips map[string]string, n int, ok bool) {
	e.t.Helper()
	list, err := e.k8s.CoreV1().Pods(p.Namespace).List(e.ctx(), metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name})
	if err != nil || len(list.Items) != 1 {
		e.t.Fatalf("list pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	raw, ok := list.Items[0].Annotations[annotNetworkStatus]
	if !ok {
		return nil, 0, false
	}
	var st []networkStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		e.t.Fatalf("network-status of %s/%s: %v\n%s", p.Namespace, p.Name, err, raw)
	}
	ips = map[string]string{}
	for _, s := range st {
		if len(s.IPs) > 0 {
			ips[s.Interface] = s.IPs[0]
		}
	}
	return ips, len(st), true
}

// waitStatus waits (the daemon writes the status after ADD answers) for a
// network-status with n entries, and returns its addresses by interface.
func (e *criEnv) waitStatus(p *corev1.Pod, n int) map[string]string {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		ips, got, ok := e.statusIPs(p)
		if ok && got == n {
			return ips
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s/%s: network-status present %v with %d entries after %s, want %d", p.Namespace, p.Name, ok, got, reportWait, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantErr checks that err holds every one of subs.
func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("RunPodSandbox succeeded, want an error naming %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
}
