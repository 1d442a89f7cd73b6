package e2e

// Hot-plug end to end (docs/hotplug.md): the daemon watches the pods of its
// node, and brings a running pod's attachments to its networks annotation
// when the annotation changes.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/scratch"
)

// hotplugEnv is a thickEnv whose daemon watches the node's pods.
type hotplugEnv struct {
	*thickEnv
	metrics    string // the daemon's metrics address
	kubeconfig string // the daemon's --kubeconfig
}

func newHotplugEnv(t *testing.T) *hotplugEnv {
	t.Helper()
	return newHotplugEnvBin(t, false)
}

// newHotplugEnvBin is newHotplugEnv whose thick bin dir holds the manifold
// binary too when fallback is true, so that the shim runs it when the daemon
// is gone.
func newHotplugEnvBin(t *testing.T, fallback bool) *hotplugEnv {
	t.Helper()
	return newHotplugEnvWith(t, fallback, "")
}

// newHotplugEnvWith is newHotplugEnvBin whose daemon's --kubeconfig is
// kubeconfig ("" for the env's).
func newHotplugEnvWith(t *testing.T, fallback bool, kubeconfig string) *hotplugEnv {
	t.Helper()
	e := &hotplugEnv{thickEnv: &thickEnv{env: newEnv(t)}, kubeconfig: kubeconfig}
	if e.kubeconfig == "" {
		e.kubeconfig = e.cp.KubeconfigPath
	}
	e.thick = testenv.NewRuntime(t, testenv.ThickBinDir(t, fallback))
	e.socket = filepath.Join(t.TempDir(), "run", "manifold.sock")
	e.metrics = testenv.FreeLoopbackAddr(t)
	e.startDaemon()
	return e
}

// startDaemon starts the env's daemon on its socket; it is stopped when the
// test ends.
func (e *hotplugEnv) startDaemon() {
	e.t.Helper()
	d, err := testenv.RunDaemon(testenv.Manifold(e.t), e.socket, os.Stderr, "--bin-dir", e.thick.BinDir, "--cni-dir", e.cniDir,
		"--conf-dir", e.confDir, "--kubeconfig", e.kubeconfig, "--log-file", e.logFile,
		"--node-name", "e2e-node", "--metrics-address", e.metrics)
	if err != nil {
		e.t.Fatal(err)
	}
	e.daemon = d
	e.t.Cleanup(func() { d.Stop(e.t) })
}

// setNetworks changes the pod's networks annotation, as a user would.
func (e *hotplugEnv) setNetworks(p *corev1.Pod, value string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotNetworks, value)
	if _, err := e.k8s.CoreV1().Pods(p.Namespace).Patch(e.ctx(), p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("patch networks of pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// statusNames lists the network-status entries as "interface=name".
func (e *hotplugEnv) statusNames(p *corev1.Pod) []string {
	st, _ := e.status(p)
	var out []string
	for _, s := range st {
		out = append(out, s.Interface+"="+s.Name)
	}
	return out
}

// waitStatus polls until network-status lists exactly want (interface=name,
// in order), for at most reportWait.
func (e *hotplugEnv) waitStatus(p *corev1.Pod, want ...string) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		got := e.statusNames(p)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("network-status after %s = %v, want %v", reportWait, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEvent polls until the pod has an event of the type and reason whose
// message holds sub.
func (e *hotplugEnv) waitEvent(p *corev1.Pod, typ, reason, sub string) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		for _, ev := range eventsOf(e.events(p), typ, reason) {
			if strings.Contains(ev.Message, sub) {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no %s %s event holding %q after %s; events: %v", typ, reason, sub, reportWait, eventMessages(e.events(p)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recorded lists the interfaces in the sandbox's record.
func (e *hotplugEnv) recorded(sb *sandbox) []string {
	e.t.Helper()
	rec, err := (&scratch.Store{Dir: e.cniDir}).Load(sb.ContainerID)
	if err != nil || rec == nil {
		e.t.Fatalf("record of %s: %v, %v", sb.ContainerID, rec, err)
	}
	var out []string
	for _, a := range rec.Attachments {
		out = append(out, a.IfName)
	}
	return out
}

// addrIn reports whether the interface in the netns has an address in s.
func addrIn(t *testing.T, sb *sandbox, ifname string, s subnet) bool {
	l, ok := links(t, sb.netns)[ifname]
	if !ok {
		return false
	}
	for _, a := range l.addrs {
		if s.Contains(a.IP) {
			return true
		}
	}
	return false
}

// healthz is the daemon's /healthz: its status code and body. The daemon
// listens there shortly after it listens on its socket.
func (e *hotplugEnv) healthz() (int, string) {
	e.t.Helper()
	res, err := http.Get("http://" + e.metrics + "/healthz")
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		res, err = http.Get("http://" + e.metrics + "/healthz")
	}
	if err != nil {
		e.t.Fatalf("/healthz: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// metric reads one sample of the daemon's metrics endpoint (0 when absent).
func (e *hotplugEnv) metric(name string, labels ...string) float64 {
	e.t.Helper()
	res, err := http.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		e.t.Fatalf("read metrics: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	sel := ""
	if len(labels) > 0 {
		sel = `\{` + strings.Join(labels, ",") + `\}`
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + sel + ` (\S+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// A network added to a running pod's annotation is attached (interface,
// address, record, network-status, event); one removed is detached with its
// lease; a swap on the same interface name detaches and then attaches. The
// metrics endpoint counts the calls and the hot-plugs.
func TestHotplugAddRemoveSwap(t *testing.T) {
	e, pod, conf, box, sm, sb := newMvPod(t)
	if got := e.metric("manifold_daemon_calls_total", `result="ok"`, `verb="ADD"`); got < 1 {
		t.Errorf("manifold_daemon_calls_total{ADD,ok} = %v after an ADD, want at least 1", got)
	}
	attached := e.metric("manifold_daemon_hotplug_operations_total", `operation="attach"`, `result="ok"`)
	if res, err := http.Get("http://" + e.metrics + "/healthz"); err != nil || res.StatusCode != 200 {
		t.Errorf("/healthz: %v %v, want 200", res, err)
	}

	// Add.
	e.setNetworks(pod, "mv, br")
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv", "net2="+e.ns+"/br")
	if !addrIn(t, box, "net2", sb) {
		t.Errorf("net2 in the pod netns has no address in %s: %v", sb, links(t, box.netns))
	}
	e.waitEvent(pod, corev1.EventTypeNormal, "AddedInterface", "Add net2")
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1", "net2"}) {
		t.Errorf("record after the add holds %v", got)
	}
	// The counter goes up when the reconcile returns, after its status write
	// and its event, which the waits above saw.
	if got := e.waitMetric(attached+1, "manifold_daemon_hotplug_operations_total", `operation="attach"`, `result="ok"`); got != attached+1 {
		t.Errorf("attach ok = %v after a hot-plug, want %v", got, attached+1)
	}
	if got := e.metric("manifold_daemon_api_requests_total", `kind="pod_watch"`, `result="ok"`); got < 1 {
		t.Errorf("pod_watch requests = %v, want at least 1", got)
	}

	// Remove: the interface and its lease go.
	e.setNetworks(pod, "br")
	e.waitStatus(pod, "eth0="+clusterName, "net2="+e.ns+"/br")
	if _, ok := links(t, box.netns)["net1"]; ok {
		t.Error("net1 still in the pod netns after it was removed")
	}
	e.waitEvent(pod, corev1.EventTypeNormal, "RemovedInterface", "Remove net1")
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 2 {
		t.Errorf("host-local leases after the removal = %v, want 2 (eth0, net2)", got)
	}

	// Swap on the same interface name.
	e.setNetworks(pod, `[{"name":"mv","interface":"net2"}]`)
	e.waitStatus(pod, "eth0="+clusterName, "net2="+e.ns+"/mv")
	if !addrIn(t, box, "net2", sm) {
		t.Errorf("net2 after the swap has no address in %s: %v", sm, links(t, box.netns))
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net2"}) {
		t.Errorf("record after the swap holds %v", got)
	}

	// The pod's DEL removes the hot-plugged attachment too.
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// A bad change changes nothing: a NAD that does not exist gets a Warning
// naming it, and a delegate that fails is rolled back, with a Warning.
func TestHotplugRefusedAndRolledBack(t *testing.T) {
	e := newHotplugEnv(t)
	sm := nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.nad(e.ns, "broken", fmt.Sprintf(`{"cniVersion":"1.0.0","type":"macvlan","master":"no-such-link","mode":"bridge",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, nextSubnet(), e.leaseDir))
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv"})
	conf := e.thickConf(nil)
	box := e.thickSandbox(pod, conf)
	e.mustAdd(conf, box)
	want := []string{"eth0=" + clusterName, "net1=" + e.ns + "/mv"}
	e.waitStatus(pod, want...)

	e.setNetworks(pod, "mv, nope")
	e.waitEvent(pod, corev1.EventTypeWarning, "HotplugFailed", e.ns+"/nope")
	if got := sorted(keys(links(t, box.netns))); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("interfaces after a change naming a missing NAD = %v", got)
	}
	if got := e.statusNames(pod); !slices.Equal(got, want) {
		t.Errorf("network-status after a refused change = %v, want %v", got, want)
	}

	e.setNetworks(pod, "mv, broken")
	e.waitEvent(pod, corev1.EventTypeWarning, "HotplugFailed", e.ns+"/broken")
	if got := sorted(keys(links(t, box.netns))); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("interfaces after a failed attach = %v", got)
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("record after a failed attach holds %v, want it rolled back", got)
	}
	if got := e.statusNames(pod); !slices.Equal(got, want) {
		t.Errorf("network-status after a failed attach = %v, want %v", got, want)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// newMvPod is a hot-plug env with two NADs, "mv" (a macvlan on sm) and "br"
// (a bridge on sb), and a running pod attached to mv as net1.
func newMvPod(t *testing.T) (e *hotplugEnv, pod *corev1.Pod, conf *libcni.NetworkConfigList, box *sandbox, sm, sb subnet) {
	e = newHotplugEnv(t)
	sm, sb = nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	pod = e.pod(e.ns, map[string]string{annotNetworks: "mv"})
	conf = e.thickConf(nil)
	box = e.thickSandbox(pod, conf)
	e.mustAdd(conf, box)
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")
	return e, pod, conf, box, sm, sb
}

// TestHotplugKubeconfigLate: the daemon starts before the kubeconfig it is
// given exists, as when the installer that writes it starts with the daemon.
// Until the file appears, /healthz answers 503 saying that hot-plug is not
// running, and manifold_daemon_hotplug_running is 0; then the pod watch is
// set up (its set-up is tried again, with growing waits) and a change of a
// pod's networks is made. Before, hot-plug stayed off for good and /healthz
// answered 200.
func TestHotplugKubeconfigLate(t *testing.T) {
	late := filepath.Join(t.TempDir(), "manifold.kubeconfig")
	e := newHotplugEnvWith(t, false, late)
	if code, body := e.healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "hot-plug is not running") {
		t.Errorf("/healthz without the kubeconfig = %d %q, want 503 saying that hot-plug is not running", code, body)
	}
	if got := e.metric("manifold_daemon_hotplug_running"); got != 0 {
		t.Errorf("manifold_daemon_hotplug_running without the kubeconfig = %v, want 0", got)
	}
	kc, err := os.ReadFile(e.cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(late, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for code, body := e.healthz(); code != http.StatusOK; code, body = e.healthz() {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz 2 minutes after the kubeconfig appeared = %d %q, want 200", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := e.metric("manifold_daemon_hotplug_running"); got != 1 {
		t.Errorf("manifold_daemon_hotplug_running once set up = %v, want 1", got)
	}

	sm := nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	pod := e.pod(e.ns, nil)
	conf := e.thickConf(map[string]any{"kubeconfig": late})
	box := e.thickSandbox(pod, conf)
	e.mustAdd(conf, box)
	e.waitStatus(pod, "eth0="+clusterName)
	e.setNetworks(pod, "mv")
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// A change made while the daemon is down is made when it starts again.
func TestHotplugDaemonRestart(t *testing.T) {
	e, pod, conf, box, _, sb := newMvPod(t)

	e.daemon.Stop(t)
	e.setNetworks(pod, "br")
	e.startDaemon()
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/br")
	if !addrIn(t, box, "net1", sb) {
		t.Errorf("net1 after the restart has no address in %s: %v", sb, links(t, box.netns))
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// The pod's DEL right after an annotation change wins: whatever the
// hot-plug did before it, nothing is left after it; and once the daemon is
// done with the change (which may come after the DEL), still nothing.
func TestHotplugDelRightAfterChange(t *testing.T) {
	e, pod, conf, box, _, _ := newMvPod(t)
	before := e.waitAllHandled()

	e.setNetworks(pod, "br, mv@net5")
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
	// A hot-plug still on its way finds no record, and leaves nothing.
	e.waitHandled(before + 1)
	e.checkNothingLeft(box)
}

// waitMetric polls a sample of the daemon's metrics until it is at least
// want, for at most reportWait, and returns its last value; at the deadline
// it fails the test.
func (e *hotplugEnv) waitMetric(want float64, name string, labels ...string) float64 {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		got := e.metric(name, labels...)
		if got >= want {
			return got
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%s%v is %v after %s, want at least %v", name, labels, got, reportWait, want)
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// handled is how many pods the daemon's hot-plug workers were done with,
// without an error (a failed one is tried again).
func (e *hotplugEnv) handled() float64 {
	e.t.Helper()
	const name = "manifold_daemon_hotplug_pods_handled_total"
	return e.metric(name, `result="changed"`) + e.metric(name, `result="unchanged"`)
}

// waitHandled waits (bounded) until the daemon was done with n pods.
func (e *hotplugEnv) waitHandled(n float64) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for e.handled() < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("the daemon's hot-plug was done with %v pods after %s, want %v", e.handled(), reportWait, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAllHandled waits until the daemon was done with every pod of its node
// once (its watch hands each one over when it starts, and again when the
// pod's networks change), and returns the count: the next change of one pod
// makes it one more.
func (e *hotplugEnv) waitAllHandled() float64 {
	e.t.Helper()
	pods, err := e.k8s.CoreV1().Pods("").List(e.ctx(), metav1.ListOptions{FieldSelector: "spec.nodeName=e2e-node"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitHandled(float64(len(pods.Items)))
	return e.handled()
}

// Many pods changed at once are all reconciled, and their DELs leave nothing.
func TestHotplugManyPods(t *testing.T) {
	e := newHotplugEnv(t)
	sm, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	conf := e.thickConf(nil)
	const n = 50
	pods := make([]*corev1.Pod, n)
	boxes := make([]*sandbox, n)
	for i := range n {
		pods[i] = e.pod(e.ns, map[string]string{annotNetworks: "mv"})
		boxes[i] = e.thickSandbox(pods[i], conf)
		e.mustAdd(conf, boxes[i])
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { e.setNetworks(pods[i], "br") })
	}
	wg.Wait()
	for i := range n {
		e.waitStatus(pods[i], "eth0="+clusterName, "net1="+e.ns+"/br")
	}
	for i := range n {
		e.mustDel(conf, boxes[i])
	}
	// The pods share the cluster bridge: it is empty only after the last DEL.
	for i := range n {
		e.checkNothingLeft(boxes[i])
	}
}

// The daemon killed with SIGKILL in the middle of a hot-plug ADD, once the
// network's real plugin (macvlan) has attached and while the gate plugin
// chained after it holds the ADD open: the record was written ahead, so the
// pod's DEL, run by the manifold binary since the daemon is gone, leaves
// nothing; and separately, so does a GC whose valid set does not hold the
// container.
func TestHotplugDaemonKilledMidAttach(t *testing.T) {
	for _, cleanup := range []string{"DEL", "GC"} {
		t.Run(cleanup, func(t *testing.T) {
			e := newHotplugEnvBin(t, true)
			dir := t.TempDir()
			reached, release := filepath.Join(dir, "reached"), filepath.Join(dir, "release")
			// Whatever happens, no gate is left waiting.
			t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o600) })
			e.nad(e.ns, "mv", e.macvlanConf("", nextSubnet()))
			e.nad(e.ns, "held", gatedConf(t, e.macvlanConf("held-net", nextSubnet()), reached, release))
			pod := e.pod(e.ns, map[string]string{annotNetworks: "mv"})
			conf := e.thickConf(nil)
			box := e.thickSandbox(pod, conf)
			e.mustAdd(conf, box)
			e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")

			e.setNetworks(pod, "mv, held")
			waitForFile(t, reached, reportWait)
			if _, ok := links(t, box.netns)["net2"]; !ok {
				t.Fatalf("net2 not in the pod netns while the gate holds its ADD: %v", links(t, box.netns))
			}
			if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 3 {
				t.Fatalf("host-local leases at the kill = %v, want 3 (eth0, net1, net2)", got)
			}
			e.daemon.Kill(t)

			switch cleanup {
			case "DEL":
				// The shim finds no daemon and runs the manifold binary.
				e.mustDel(conf, box)
			case "GC":
				gc := *conf
				gc.CNIVersion = "1.1.0" // GC is CNI 1.1; libcni injects the list's version
				args := &libcni.GCArgs{ValidAttachments: []cnitypes.GCAttachment{}}
				if err := e.thick.CNI.GCNetworkList(e.ctx(), &gc, args); err != nil {
					t.Fatalf("GC: %v", err)
				}
			}
			e.checkNothingLeft(box)
		})
	}
}

// gatedConf wraps a single-plugin config into a conflist that ends with the
// gate test plugin (internal/testenv/gate): its ADD creates reached and waits
// for release.
func gatedConf(t *testing.T, conf, reached, release string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	list := map[string]any{"cniVersion": m["cniVersion"], "name": m["name"],
		"plugins": []any{m, map[string]any{"type": "gate", "reached": reached, "release": release}}}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitForFile polls for path, for at most bound.
func waitForFile(t *testing.T, path string, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within %s", path, bound)
}
