package e2e

// Thick mode end to end: the runtime calls manifold-shim, which passes the call
// over a unix socket to `manifold daemon` (or, when no daemon answers, runs the
// manifold binary next to it). The daemon answers ADD before it writes the
// network-status and the events, so the tests poll for them, within a bound.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// reportWait bounds the wait for what the daemon writes after ADD has
// answered: the pod's network-status and events, a DRA claim's
// status.devices, and what the hot-plug writes after a change of the pod's
// networks. Every wait on it polls for the write and returns as soon as
// it shows, so the bound costs nothing when the write comes; it only says
// when to give up, and a loaded CI machine (two cores shared by a control
// plane, the daemon and its plugins) may take many seconds to make the write,
// whose requests are each bounded by apiTimeout. The cluster tier allows 5
// minutes for the same kind of wait.
const reportWait = 2 * time.Minute

// thickEnv is an env whose runtime calls manifold-shim. Its bin dir holds the
// plugins and manifold-shim, and manifold only when the shim may fall back to
// it: without it, a call that succeeds can only have been served by the
// daemon. The embedded env keeps its own runtime (a bin dir with manifold),
// which the sandboxes' last-resort cleanup uses.
type thickEnv struct {
	*env
	thick  *testenv.Runtime
	socket string
	daemon *testenv.Daemon // nil when the test runs none
}

// newThickEnv makes the env and the thick bin dir. With daemon, it starts
// `manifold daemon` on a socket in a temp dir; without, the socket is a path
// in a temp dir where nothing listens.
func newThickEnv(t *testing.T, fallback, daemon bool) *thickEnv {
	t.Helper()
	e := &thickEnv{env: newEnv(t)}
	dir := testenv.ThickBinDir(t, fallback)
	if _, err := os.Lstat(filepath.Join(dir, "manifold")); (err == nil) != fallback {
		t.Fatalf("thick bin dir %s: manifold present = %v, want %v", dir, err == nil, fallback)
	}
	e.thick = testenv.NewRuntime(t, dir)
	if daemon {
		// Started before any sandbox, so it is stopped after their DELs.
		// Its flags fix the node paths of thickConf's config.
		e.daemon = testenv.StartDaemon(t, testenv.Manifold(t), "--bin-dir", e.thick.BinDir, "--cni-dir", e.cniDir,
			"--conf-dir", e.confDir, "--kubeconfig", e.cp.KubeconfigPath, "--log-file", e.logFile)
		e.socket = e.daemon.Socket
	} else {
		e.socket = filepath.Join(t.TempDir(), "run", "manifold.sock")
	}
	return e
}

// thickConf is manifoldConf with manifold-shim as the type, the env's socket
// as daemonSocket, and the thick bin dir as manifold's binDir.
func (e *thickEnv) thickConf(extra map[string]any) *libcni.NetworkConfigList {
	e.t.Helper()
	all := map[string]any{"daemonSocket": e.socket, "binDir": e.thick.BinDir}
	for k, v := range extra {
		all[k] = v
	}
	var list map[string]any
	if err := json.Unmarshal(e.manifoldConf(all).Bytes, &list); err != nil {
		e.t.Fatal(err)
	}
	plugins, _ := list["plugins"].([]any)
	if len(plugins) != 1 {
		e.t.Fatalf("manifoldConf has %d plugins, want 1", len(plugins))
	}
	plugins[0].(map[string]any)["type"] = "manifold-shim"
	b, err := json.Marshal(list)
	if err != nil {
		e.t.Fatal(err)
	}
	return testenv.Conf(e.t, b)
}

// thickSandbox is sandboxFor, plus a DEL through the shim when the test ends.
// That DEL runs before sandboxFor's own (through the manifold binary, which
// catches what is left if the daemon is gone) and before the netns goes.
func (e *thickEnv) thickSandbox(p *corev1.Pod, conf *libcni.NetworkConfigList) *sandbox {
	e.t.Helper()
	sb := e.sandboxFor(p)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.thick.Del(ctx, conf, sb.Pod)
	})
	return sb
}

func (e *thickEnv) add(conf *libcni.NetworkConfigList, sb *sandbox) (types.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e.thick.Add(ctx, conf, sb.Pod)
}

func (e *thickEnv) mustAdd(conf *libcni.NetworkConfigList, sb *sandbox) *types100.Result {
	e.t.Helper()
	res, err := e.add(conf, sb)
	if err != nil {
		e.t.Fatalf("ADD through manifold-shim: %v", err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		e.t.Fatalf("convert ADD result: %v", err)
	}
	return cur
}

func (e *thickEnv) mustDel(conf *libcni.NetworkConfigList, sb *sandbox) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.thick.Del(ctx, conf, sb.Pod); err != nil {
		e.t.Fatalf("DEL through manifold-shim: %v", err)
	}
}

// bridgeNAD is a bridge network on its own host bridge (removed when the test
// ends) with host-local IPAM, no gateway and no routes.
func (e *thickEnv) bridgeNAD(name string, s subnet) {
	e.t.Helper()
	br := testenv.UniqueName("mfthk")
	e.t.Cleanup(func() { testenv.DeleteLink(br) })
	e.nad(e.ns, name, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, name+"-net", br, s, e.leaseDir))
}

// waitReported polls, for at most reportWait, until the pod has a
// network-status with n entries and n AddedInterface events. It reports what
// it last saw when the bound passes; the caller then checks the details.
func (e *thickEnv) waitReported(p *corev1.Pod, n int) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for polls := 1; ; polls++ {
		st, ok := e.status(p)
		added := eventsOf(e.events(p), corev1.EventTypeNormal, "AddedInterface")
		if ok && len(st) == n && len(added) == n {
			e.t.Logf("network-status and events complete at poll %d", polls)
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s after ADD answered: network-status present %v with %d entries, %d AddedInterface events; want %d of each",
				reportWait, ok, len(st), len(added), n)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Thick mode, served by the daemon: a pod with a macvlan and a bridge NAD.
// The bin dir has no manifold binary, so only the daemon can have answered.
// The status and the events come after the answer; the test waits for them.
func TestThickMode(t *testing.T) {
	e := newThickEnv(t, false, true)
	sm, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv, br"})
	conf := e.thickConf(nil)
	box := e.thickSandbox(pod, conf)

	res := e.mustAdd(conf, box)
	if got, want := sorted(keys(links(t, box.netns))), []string{"eth0", "net1", "net2"}; !slices.Equal(got, want) {
		t.Errorf("interfaces in the pod netns right after ADD = %v, want %v", got, want)
	}
	e.waitReported(pod, 3)
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/mv", ifname: "net1", subnet: sm},
		{name: e.ns + "/br", ifname: "net2", subnet: sb},
	})
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 3 {
		t.Errorf("host-local leases after ADD = %v, want 3", got)
	}
	if err := e.thick.Check(e.ctx(), conf, box.Pod); err != nil {
		t.Errorf("CHECK through the daemon: %v", err)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	if e.daemon.Exited() {
		t.Error("the daemon exited during the test")
	}
}

// Thick mode with no daemon: nothing listens on the socket path, so the shim
// runs the manifold binary next to it, which writes the status before it
// answers.
func TestThickFallbackWithAPI(t *testing.T) {
	e := newThickEnv(t, true, false)
	if _, err := os.Stat(e.socket); !os.IsNotExist(err) {
		t.Fatalf("socket path %s: %v, want it not to exist", e.socket, err)
	}
	sm, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv, br"})
	conf := e.thickConf(nil)
	box := e.thickSandbox(pod, conf)

	res := e.mustAdd(conf, box)
	// No polling: the binary writes the status and the events before it exits.
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/mv", ifname: "net1", subnet: sm},
		{name: e.ns + "/br", ifname: "net2", subnet: sb},
	})
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 3 {
		t.Errorf("host-local leases after ADD = %v, want 3", got)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// Thick mode keeps error codes: through the daemon, an annotation that names
// a missing NAD gets code 7 naming the pod and the NAD, nothing is attached,
// and the pod gets a Warning event. The runtime's DEL after it succeeds.
func TestThickRefusedAnnotation(t *testing.T) {
	e := newThickEnv(t, false, true)
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	pod := e.pod(e.ns, map[string]string{annotNetworks: "a, nope"})
	conf := e.thickConf(nil)
	box := e.thickSandbox(pod, conf)

	_, err := e.add(conf, box)
	wantCode(t, err, 7, e.ns+"/"+pod.Name, "nope")
	e.checkRefused(box, "nope")

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	if e.daemon.Exited() {
		t.Error("the daemon exited during the test")
	}
}

// The daemon remembers the NADs it has read, and builds a pod's networks from
// that memory while their reads are on the way; each read confirms its network
// before the network's delegate runs. A NAD changed since the daemon last read
// it is attached in its new form, and one deleted since fails the ADD with the
// usual code 7 and nothing left attached, although the default network was
// attached before the read said so.
func TestThickRememberedNAD(t *testing.T) {
	e := newThickEnv(t, false, true)
	// The daemon's --log-file is the env's logFile.
	logFile := e.logFile
	conf := e.thickConf(map[string]any{"logLevel": "info"})
	oldNet, newNet := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", oldNet))
	attach := func(s subnet) {
		t.Helper()
		pod := e.pod(e.ns, map[string]string{annotNetworks: "mv"})
		box := e.thickSandbox(pod, conf)
		res := e.mustAdd(conf, box)
		e.waitReported(pod, 2)
		e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/mv", ifname: "net1", subnet: s}})
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	}
	attach(oldNet)

	e.setNADConfig(e.ns, "mv", e.macvlanConf("", newNet))
	attach(newNet)
	// Which way the second ADD went depends on whether the NAD's read
	// answered before the lookup (then the memory was not used): nearly
	// never, but the outcome above is the test; this only says which path
	// it took.
	if b, err := os.ReadFile(logFile); err == nil && !strings.Contains(string(b), "NAD changed since the daemon last read it") {
		t.Logf("the second ADD did not build net1 from the daemon's memory (log: %s)", b)
	}

	if err := e.cp.Dynamic().Resource(controlplane.NADResource).Namespace(e.ns).Delete(e.ctx(), "mv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv"})
	box := e.thickSandbox(pod, conf)
	_, err := e.add(conf, box)
	wantCode(t, err, 7, e.ns+"/"+pod.Name, "mv")
	e.checkRefused(box, "mv")
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	if e.daemon.Exited() {
		t.Error("the daemon exited during the test")
	}
}
