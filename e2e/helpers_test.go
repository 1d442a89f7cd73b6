package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/netconf"
)

// Annotation keys manifold reads and writes.
const (
	annotNetworks       = "k8s.v1.cni.cncf.io/networks"
	annotNetworkStatus  = "k8s.v1.cni.cncf.io/network-status"
	annotDefaultNetwork = "v1.multus-cni.io/default-network"
)

// Timeouts in manifold's config. apiTimeout is short enough to keep the
// failure scenarios quick, yet leaves room for a loaded 2-core machine, where a
// request can stall for a second or two; TestAPIServerDown uses
// shortAPITimeout, since there every request is meant to fail.
const (
	apiTimeout      = 5 * time.Second
	shortAPITimeout = 2 * time.Second
	podWaitTimeout  = 1 * time.Second
)

// clusterName is the CNI name of every env's default network.
const clusterName = "e2e-cluster"

// subnets hands out a fresh /24 to every network a test makes, so bridges of
// different tests never share a prefix on the host.
var subnets atomic.Int32

// subnet is one /24: 10.231.<n>.0/24.
type subnet struct{ n int32 }

func nextSubnet() subnet { return subnet{subnets.Add(1)} }

func (s subnet) String() string       { return fmt.Sprintf("10.231.%d.0/24", s.n) }
func (s subnet) IP(host int) string   { return fmt.Sprintf("10.231.%d.%d", s.n, host) }
func (s subnet) CIDR(host int) string { return s.IP(host) + "/24" }
func (s subnet) Contains(ip net.IP) bool {
	return ip.To4() != nil && ip.To4()[1] == 231 && int32(ip.To4()[2]) == s.n
}

// env is one test's node and cluster: a bin dir with manifold and the plugins,
// manifold's dirs, host-local's lease dir, a bridge default network, a veth
// parent for macvlan NADs, and two fresh namespaces on the shared API server:
// ns for the test's pods and NADs, and sysNS as manifold's multusNamespace
// (also its only system namespace).
type env struct {
	t         *testing.T
	cp        *controlplane.ControlPlane
	k8s       kubernetes.Interface
	rt        *testenv.Runtime
	cniDir    string
	confDir   string
	leaseDir  string
	tuningDir string
	logFile   string
	bridge    string
	parent    string
	ns        string
	sysNS     string
	cluster   subnet
	// clusterPath is the conflist file of the default network (clusterNetwork).
	clusterPath string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, controlPlane(t))
}

// newEnvOn is newEnv on the control plane cp.
func newEnvOn(t *testing.T, cp *controlplane.ControlPlane) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{
		t:         t,
		cp:        cp,
		k8s:       cp.Clientset(),
		rt:        testenv.NewRuntime(t, testenv.BinDir(t)),
		cniDir:    filepath.Join(tmp, "cni"),
		confDir:   filepath.Join(tmp, "net.d"),
		leaseDir:  filepath.Join(tmp, "leases"),
		tuningDir: filepath.Join(tmp, "tuning"),
		logFile:   filepath.Join(tmp, "manifold.log"),
		bridge:    testenv.UniqueName("mfe2e"),
		cluster:   nextSubnet(),
	}
	for _, d := range []string{e.cniDir, e.confDir, e.leaseDir, e.tuningDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { testenv.DeleteLink(e.bridge) })
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(e.logFile); err == nil {
				t.Logf("manifold log:\n%s", b)
			}
		}
	})
	e.parent = testenv.VethParent(t)
	e.ns = e.namespace("e2e-")
	e.sysNS = e.namespace("e2e-sys-")
	e.clusterPath = filepath.Join(tmp, "cluster.conflist")
	e.writeFile(e.clusterPath, e.bridgeConflist(clusterName, e.bridge, e.cluster))
	return e
}

// sub is the env for a subtest: the same node and namespaces, with t's
// failures and cleanups.
func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

func (e *env) writeFile(path, content string) {
	e.t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// dnsSearch is the search domain of every bridge network's DNS settings.
const dnsSearch = "e2e.example"

// bridgeConflist is a bridge network with host-local IPAM, a default route via
// the bridge, and DNS settings (nameserver .53 of the subnet) that the bridge
// plugin copies into its result.
func (e *env) bridgeConflist(name, bridge string, s subnet) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":true,
		"dns":{"nameservers":[%q],"search":[%q]},
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}}]}`, name, bridge, s.IP(53), dnsSearch, s, e.leaseDir)
}

// clusterWant is the default network as most scenarios expect it.
func (e *env) clusterWant() want {
	return want{name: clusterName, ifname: "eth0", subnet: e.cluster, gateway: []string{e.cluster.IP(1)}, dns: []string{e.cluster.IP(53)}}
}

// macvlanConf is a single-plugin macvlan network on the env's veth parent with
// host-local IPAM and no routes. An empty name leaves "name" out, so manifold
// must inject the NAD's name.
func (e *env) macvlanConf(name string, s subnet) string {
	nameField := ""
	if name != "" {
		nameField = fmt.Sprintf(`"name":%q,`, name)
	}
	return fmt.Sprintf(`{"cniVersion":"1.0.0",%s"type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, nameField, e.parent, s, e.leaseDir)
}

// manifoldConf is manifold's config as the runtime holds it: a conflist with
// manifold as the only plugin. extra keys are added to, or replace, the
// defaults.
func (e *env) manifoldConf(extra map[string]any) *libcni.NetworkConfigList {
	e.t.Helper()
	plugin := map[string]any{
		"type":             "manifold",
		"kubeconfig":       e.cp.KubeconfigPath,
		"clusterNetwork":   e.clusterPath,
		"cniDir":           e.cniDir,
		"confDir":          e.confDir,
		"binDir":           e.rt.BinDir,
		"multusNamespace":  e.sysNS,
		"systemNamespaces": []string{e.sysNS},
		"apiTimeout":       apiTimeout.String(),
		"podWaitTimeout":   podWaitTimeout.String(),
		"logFile":          e.logFile,
		"logLevel":         "debug",
		// As manifold-install writes it: the runtime passes the pod's annotations.
		"capabilities": map[string]bool{netconf.CapPodAnnotations: true},
	}
	for k, v := range extra {
		plugin[k] = v
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "manifold-e2e", "plugins": []any{plugin}})
	if err != nil {
		e.t.Fatal(err)
	}
	return testenv.Conf(e.t, b)
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// namespace creates a namespace with a unique name, ready for pods: on the
// cluster plane, once its "default" ServiceAccount and root CA are there.
func (e *env) namespace(prefix string) string {
	e.t.Helper()
	name := testenv.UniqueName(prefix)
	_, err := e.k8s.CoreV1().Namespaces().Create(e.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create namespace %s: %v", name, err)
	}
	if err := e.cp.WaitNamespaceReady(e.ctx(), name); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// nad creates a NetworkAttachmentDefinition through the dynamic client.
func (e *env) nad(namespace, name, config string) {
	e.t.Helper()
	e.annotatedNAD(namespace, name, config, nil)
}

// annotatedNAD is nad with annotations (what its networks draw a device
// from, say).
func (e *env) annotatedNAD(namespace, name, config string, annotations map[string]string) {
	e.t.Helper()
	n := nadv1.New(namespace, name, config)
	n.Annotations = annotations
	obj, err := n.ToUnstructured()
	if err != nil {
		e.t.Fatalf("NAD %s/%s: %v", namespace, name, err)
	}
	_, err = e.cp.Dynamic().Resource(controlplane.NADResource).Namespace(namespace).Create(e.ctx(), obj, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create NAD %s/%s: %v", namespace, name, err)
	}
}

// setNADConfig replaces the spec.config of an existing NAD.
func (e *env) setNADConfig(namespace, name, config string) {
	e.t.Helper()
	nads := e.cp.Dynamic().Resource(controlplane.NADResource).Namespace(namespace)
	obj, err := nads.Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get NAD %s/%s: %v", namespace, name, err)
	}
	if err := unstructured.SetNestedField(obj.Object, config, "spec", "config"); err != nil {
		e.t.Fatal(err)
	}
	if _, err := nads.Update(e.ctx(), obj, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("update NAD %s/%s: %v", namespace, name, err)
	}
}

// pod creates a pod bound to a node (so nothing would schedule it) with the
// given annotations.
func (e *env) pod(namespace string, annotations map[string]string) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("pod-"), Namespace: namespace, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:   "e2e-node",
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	created, err := e.k8s.CoreV1().Pods(namespace).Create(e.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod %s/%s: %v", namespace, p.Name, err)
	}
	return created
}

// getPod reads a pod back.
func (e *env) getPod(p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	got, err := e.k8s.CoreV1().Pods(p.Namespace).Get(e.ctx(), p.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return got
}

// sandbox is one pod sandbox as containerd sees it: a container ID, a netns,
// the CNI_ARGS for the pod and, for a pod the API knows, the pod's annotations
// as the kubelet gave them when it created the sandbox.
type sandbox struct {
	*testenv.Pod
	netns ns.NetNS
	k8s   *corev1.Pod // nil for a pod that the API does not know
}

// randomID is a 64-hex-digit container ID, like containerd's.
func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// containerdArgs are the CNI_ARGS containerd's CRI plugin sends for a pod
// sandbox: IgnoreUnknown=1 and the pod's identity.
func containerdArgs(namespace, name, uid, containerID string) [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", namespace},
		{"K8S_POD_NAME", name},
		{"K8S_POD_INFRA_CONTAINER_ID", containerID},
		{"K8S_POD_UID", uid},
	}
}

// sandboxFor makes a sandbox for a pod, with a fresh netns. When the test ends
// the sandbox is deleted (best effort) before its netns goes.
func (e *env) sandboxFor(p *corev1.Pod) *sandbox {
	e.t.Helper()
	return e.sandboxNamed(p.Namespace, p.Name, string(p.UID), p)
}

func (e *env) sandboxNamed(namespace, name, uid string, p *corev1.Pod) *sandbox {
	e.t.Helper()
	netns := testenv.NetNS(e.t)
	id := randomID()
	sb := &sandbox{
		Pod: &testenv.Pod{
			ContainerID: id,
			NetNS:       netns.Path(),
			IfName:      "eth0",
			Args:        containerdArgs(namespace, name, uid, id),
		},
		netns: netns,
		k8s:   p,
	}
	if p != nil {
		sb.CapabilityArgs = map[string]any{netconf.CapPodAnnotations: testenv.KubeletAnnotations(p.Annotations, time.Now())}
	}
	conf := e.manifoldConf(nil)
	e.t.Cleanup(func() { _ = e.rt.Del(context.Background(), conf, sb.Pod) })
	return sb
}

// olderRuntime makes the sandbox's runtime one that does not pass the pod's
// annotations, or a config that does not ask for them: manifold then reads
// the pod.
func (sb *sandbox) olderRuntime() *sandbox {
	sb.CapabilityArgs = nil
	return sb
}

// add runs ADD through libcni with the given manifold config.
func (e *env) add(conf *libcni.NetworkConfigList, sb *sandbox) (types.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e.rt.Add(ctx, conf, sb.Pod)
}

// mustAdd runs ADD and fails the test on error.
func (e *env) mustAdd(conf *libcni.NetworkConfigList, sb *sandbox) *types100.Result {
	e.t.Helper()
	res, err := e.add(conf, sb)
	if err != nil {
		e.t.Fatalf("ADD: %v", err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		e.t.Fatalf("convert ADD result: %v", err)
	}
	return cur
}

// mustDel runs DEL and fails the test on error.
func (e *env) mustDel(conf *libcni.NetworkConfigList, sb *sandbox) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.rt.Del(ctx, conf, sb.Pod); err != nil {
		e.t.Fatalf("DEL: %v", err)
	}
}

// wantCode checks that err is a CNI error with the code and that its message
// holds every one of subs.
func wantCode(t *testing.T, err error, code uint, subs ...string) *types.Error {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) {
		t.Fatalf("error = %v (%T), want a CNI error with code %d", err, err, code)
	}
	if te.Code != code {
		t.Errorf("error code = %d (%q), want %d", te.Code, te.Msg, code)
	}
	for _, s := range subs {
		if !strings.Contains(te.Msg, s) {
			t.Errorf("error message %q does not name %q", te.Msg, s)
		}
	}
	return te
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// listByName selects the events whose involved object has that name.
func listByName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}
}
