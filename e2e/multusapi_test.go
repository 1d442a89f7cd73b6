package e2e

// Multus's daemon API on manifold's node daemon (docs/thick-mode.md,
// "Multus's daemon API"; docs/hotplug.md, "One owner"), called with Multus's
// own client code (gopkg.in/k8snetworkplumbingwg/multus-cni.v4's
// pkg/server/api): /cni as multus-shim calls it, /delegate as the
// multus-dynamic-networks-controller calls it, /healthz and /readyz.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	multus "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/server/api"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// multusEnv is a hot-plug env whose daemon also serves Multus's API, on a
// socket in a temp dir, with --hotplug=mode.
type multusEnv struct {
	*hotplugEnv
	multusDir string // Multus's socketDir: its clients take the directory
}

func newMultusEnv(t *testing.T, mode string) *multusEnv {
	t.Helper()
	e := &multusEnv{hotplugEnv: &hotplugEnv{thickEnv: &thickEnv{env: newEnv(t)}}}
	e.kubeconfig = e.cp.KubeconfigPath
	e.thick = testenv.NewRuntime(t, testenv.ThickBinDir(t, false))
	e.socket = filepath.Join(t.TempDir(), "run", "manifold.sock")
	e.metrics = testenv.FreeLoopbackAddr(t)
	e.multusDir = filepath.Join(t.TempDir(), "multus")
	d, err := testenv.RunDaemon(testenv.Manifold(t), e.socket, os.Stderr, "--bin-dir", e.thick.BinDir, "--cni-dir", e.cniDir,
		"--conf-dir", e.confDir, "--kubeconfig", e.kubeconfig, "--log-file", e.logFile,
		"--node-name", "e2e-node", "--metrics-address", e.metrics,
		"--multus-socket", multus.SocketPath(e.multusDir), "--hotplug="+mode)
	if err != nil {
		t.Fatal(err)
	}
	e.daemon = d
	t.Cleanup(func() { d.Stop(t) })
	// The Multus socket is taken in the background: wait until it answers,
	// as Multus's clients wait for Multus's daemon.
	if err := multus.WaitUntilAPIReady(e.multusDir); err != nil {
		t.Fatalf("the Multus socket does not answer: %v", err)
	}
	return e
}

// shimCall posts one CNI call to /cni as multus-shim does: its whole
// environment, and the config on its stdin (the runtime's plugin config).
func (e *multusEnv) shimCall(cmd string, sb *sandbox, stdin []byte) ([]byte, error) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var args []string
	for _, a := range sb.Args {
		args = append(args, a[0]+"="+a[1])
	}
	env["CNI_COMMAND"], env["CNI_CONTAINERID"], env["CNI_NETNS"], env["CNI_IFNAME"] = cmd, sb.ContainerID, sb.NetNS, sb.IfName
	env["CNI_ARGS"], env["CNI_PATH"] = strings.Join(args, ";"), e.thick.BinDir
	return multus.DoCNI(multus.GetAPIEndpoint(multus.MultusCNIAPIEndpoint), &multus.Request{Env: env, Config: stdin}, multus.SocketPath(e.multusDir))
}

// shimStdin is what libcni hands the one plugin of manifold's thick conflist
// on stdin: the plugin's config with the list's name and cniVersion.
func (e *multusEnv) shimStdin() []byte {
	e.t.Helper()
	var plugin map[string]any
	if err := json.Unmarshal(e.thickConf(nil).Plugins[0].Bytes, &plugin); err != nil {
		e.t.Fatal(err)
	}
	plugin["name"], plugin["cniVersion"] = "manifold-e2e", "1.0.0"
	b, err := json.Marshal(plugin)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// delegate calls /delegate as the controller does: the sandbox found
// through the CRI, the interface the annotation names, the NAD's config with
// its name defaulted, and the entry's ips, mac and cni-args.
func (e *multusEnv) delegate(cmd string, sb *sandbox, pod *corev1.Pod, ifname, nad string, attrs *multus.DelegateInterfaceAttributes) (*multus.Response, error) {
	e.t.Helper()
	obj, err := e.cp.Dynamic().Resource(controlplane.NADResource).Namespace(pod.Namespace).Get(e.ctx(), nad, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get NAD %s: %v", nad, err)
	}
	spec, _, _ := unstructured.NestedString(obj.Object, "spec", "config")
	var conf map[string]any
	if err := json.Unmarshal([]byte(spec), &conf); err != nil {
		e.t.Fatal(err)
	}
	if conf["name"] == nil {
		conf["name"] = nad
	}
	b, _ := json.Marshal(conf)
	req := multus.CreateDelegateRequest(cmd, sb.ContainerID, sb.NetNS, ifname, pod.Namespace, pod.Name, string(pod.UID), b, attrs)
	body, err := multus.DoCNI(multus.GetAPIEndpoint(multus.MultusDelegateAPIEndpoint), req, multus.SocketPath(e.multusDir))
	if err != nil {
		return nil, err
	}
	resp := &multus.Response{}
	if len(body) > 0 {
		if err := json.Unmarshal(body, resp); err != nil {
			e.t.Fatalf("the controller cannot read the answer %s: %v", body, err)
		}
	}
	return resp, nil
}

// get is a GET of one of Multus's endpoints on its socket.
func (e *multusEnv) get(path string) int {
	e.t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", multus.SocketPath(e.multusDir))
	}}}
	res, err := c.Get(multus.GetAPIEndpoint(path))
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// With --hotplug=external: a pod attached through /cni as multus-shim calls
// it, a network hot-plugged into it and out again through /delegate as the
// controller calls it (interface, address, record, network-status, events),
// one more plugged that the runtime's DEL, through /cni, removes with the
// rest; /healthz and /readyz answer. The daemon runs no pod watch: the
// annotation edit that precedes a controller's call is not acted on by
// manifold.
func TestMultusAPIShimAndController(t *testing.T) {
	e := newMultusEnv(t, "external")
	sm, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv@net1"})
	box := e.thickSandbox(pod, e.thickConf(nil))
	stdin := e.shimStdin()

	body, err := e.shimCall("ADD", box, stdin)
	if err != nil {
		t.Fatalf("/cni ADD as multus-shim: %v", err)
	}
	var resp multus.Response
	if err := json.Unmarshal(body, &resp); err != nil || resp.Result == nil {
		t.Fatalf("multus-shim cannot read the ADD's answer %s: %v", body, err)
	}
	if len(resp.Result.IPs) == 0 || !e.cluster.Contains(resp.Result.IPs[0].Address.IP) {
		t.Errorf("ADD result %s: want the default network's address in %s", body, e.cluster)
	}
	if got := sorted(keys(links(t, box.netns))); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("interfaces after /cni ADD = %v, want eth0, net1", got)
	}
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")

	// The user adds br on net2; the controller sees it and calls /delegate.
	e.setNetworks(pod, "mv@net1, br@net2")
	resp2, err := e.delegate("ADD", box, pod, "net2", "br", nil)
	if err != nil {
		t.Fatalf("/delegate ADD as the controller: %v", err)
	}
	if resp2.Result == nil || len(resp2.Result.IPs) != 1 || !sb.Contains(resp2.Result.IPs[0].Address.IP) {
		t.Fatalf("/delegate ADD answered %+v; want the bridge's result with an address in %s", resp2, sb)
	}
	if !addrIn(t, box, "net2", sb) {
		t.Errorf("net2 in the pod netns has no address in %s: %v", sb, links(t, box.netns))
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1", "net2"}) {
		t.Errorf("record after /delegate ADD holds %v", got)
	}
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv", "net2="+e.ns+"/br")
	e.waitEvent(pod, corev1.EventTypeNormal, "AddedInterface", "Add net2")

	// And removes it again.
	e.setNetworks(pod, "mv@net1")
	if _, err := e.delegate("DEL", box, pod, "net2", "br", nil); err != nil {
		t.Fatalf("/delegate DEL as the controller: %v", err)
	}
	if _, ok := links(t, box.netns)["net2"]; ok {
		t.Error("net2 still in the pod netns after /delegate DEL")
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("record after /delegate DEL holds %v", got)
	}
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")
	e.waitEvent(pod, corev1.EventTypeNormal, "RemovedInterface", "Remove net2")
	if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 2 {
		t.Errorf("host-local leases after /delegate DEL = %v, want 2 (eth0, net1)", got)
	}
	// A DEL of what is not attached succeeds, as a CNI DEL does.
	if _, err := e.delegate("DEL", box, pod, "net2", "br", nil); err != nil {
		t.Errorf("second /delegate DEL: %v", err)
	}

	// One more, with the entry's mac, as the controller passes it in
	// interfaceAttributes: the runtime's DEL must remove it with the rest.
	const mac = "0a:58:0a:e7:00:42"
	e.nad(e.ns, "mvmac", strings.Replace(e.macvlanConf("", nextSubnet()), `"type":"macvlan",`, `"type":"macvlan","capabilities":{"mac":true},`, 1))
	e.setNetworks(pod, `[{"name":"mv","interface":"net1"},{"name":"mvmac","interface":"net3","mac":"`+mac+`"}]`)
	if _, err := e.delegate("ADD", box, pod, "net3", "mvmac", &multus.DelegateInterfaceAttributes{MacRequest: mac}); err != nil {
		t.Fatalf("/delegate ADD of net3: %v", err)
	}
	if got := links(t, box.netns)["net3"].mac; got != mac {
		t.Errorf("net3's MAC = %q, want the requested %s", got, mac)
	}
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv", "net3="+e.ns+"/mvmac")

	// An element that names no interface: the controller sends an empty
	// CNI_IFNAME, which Multus's daemon (libcni) refuses with code 4, and
	// the controller then leaves the pod alone. manifold refuses it alike
	// and attaches nothing.
	_, err = e.delegate("ADD", box, pod, "", "br", nil)
	var ce *cnitypes.Error
	if !errors.As(err, &ce) || ce.Code != cnitypes.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Msg, "CNI_IFNAME is empty") {
		t.Errorf("/delegate ADD with no interface name: %v, want code 4 saying CNI_IFNAME is empty", err)
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1", "net3"}) {
		t.Errorf("record after a /delegate ADD with no interface name holds %v, want eth0, net1, net3", got)
	}

	if err := multus.CheckAPIReadyNow(e.multusDir); err != nil {
		t.Errorf("/healthz through Multus's client: %v", err)
	}
	if code := e.get(multus.MultusHealthAPIEndpoint); code != http.StatusOK {
		t.Errorf("GET /healthz: %d", code)
	}
	if code := e.get("/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz: %d", code)
	}

	// The builtin hot-plug is off: no pod watch was ever set up, so no
	// annotation edit above was acted on by manifold's own controller.
	if got := e.metric("manifold_daemon_api_requests_total", `kind="pod_list"`, `result="ok"`) +
		e.metric("manifold_daemon_api_requests_total", `kind="pod_watch"`, `result="ok"`); got != 0 {
		t.Errorf("pod list and watch requests = %v with --hotplug=external, want 0", got)
	}
	if got := e.metric("manifold_daemon_hotplug_operations_total", `operation="attach"`, `result="ok"`); got != 2 {
		t.Errorf("attach ok = %v, want 2 (the two /delegate ADDs)", got)
	}

	// The runtime's DEL, as multus-shim sends it: nothing is left.
	if _, err := e.shimCall("DEL", box, stdin); err != nil {
		t.Fatalf("/cni DEL as multus-shim: %v", err)
	}
	e.checkNothingLeft(box)
	if _, err := e.shimCall("DEL", box, stdin); err != nil {
		t.Errorf("second /cni DEL: %v", err)
	}
}

// With --hotplug=builtin (the default), the daemon's own pod watch owns a
// hot-plug: /delegate is refused with code 7, naming the flag, and changes
// nothing, while the annotation edit is made by manifold.
func TestMultusAPIBuiltinOwnsHotplug(t *testing.T) {
	e := newMultusEnv(t, "builtin")
	sm, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv@net1"})
	conf := e.thickConf(nil)
	box := e.thickSandbox(pod, conf)
	e.mustAdd(conf, box)
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv")

	_, err := e.delegate("ADD", box, pod, "net2", "br", nil)
	var ce *cnitypes.Error
	if !errors.As(err, &ce) || ce.Code != 7 || !strings.Contains(ce.Msg, "--hotplug=external") {
		t.Fatalf("/delegate ADD with the builtin hot-plug: %v, want code 7 naming --hotplug=external", err)
	}
	if got := e.recorded(box); !slices.Equal(got, []string{"eth0", "net1"}) {
		t.Errorf("record after a refused /delegate ADD holds %v", got)
	}

	e.setNetworks(pod, "mv@net1, br@net2")
	e.waitStatus(pod, "eth0="+clusterName, "net1="+e.ns+"/mv", "net2="+e.ns+"/br")
	if !addrIn(t, box, "net2", sb) {
		t.Errorf("net2 in the pod netns has no address in %s: %v", sb, links(t, box.netns))
	}
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}
