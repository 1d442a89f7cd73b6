package cluster_test

// Multus v4.3.0's own e2e scenarios (its e2e/test-*.sh and the pods and NADs
// of e2e/templates/), run on the cluster tier's node with manifold installed
// from its image, in thin and in thick mode (issue 33). Multus checks them
// with `kubectl exec … ip a` and `sysctl` in a centos pod; the pods here have
// no shell, so the test reads each pod's network namespace from the host
// instead (cluster.PodNet): its interfaces, addresses, routes and sysctls,
// and then network-status. Multus's scripts only print a wrong address or
// gateway; here it fails the test.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// auxChain is the auxiliaryCNIChainName that manifold is installed with, as
// Multus's e2e sets it in its daemon config: its chain is the .conf files of
// /etc/cni/net.d/vendor-cni-chain/, next to the primary's file. While that
// directory does not exist (every scenario but the auxiliary chain's), the
// chain runs nothing.
const auxChain = "vendor-cni-chain"

// auxInstallerArg is the installer flag that sets it, as docs/install.md
// gives it (TestDocsGiveTheCommands).
const auxInstallerArg = `--additional-config={"auxiliaryCNIChainName":"` + auxChain + `"}`

// The primary network's view inside a pod (cluster.PrimaryConfig): eth0 in
// its subnet, the default route through its bridge.
const (
	primaryDefault = "default via 10.244.0.1 dev eth0"
	arpFilterEth0  = "net.ipv4.conf.eth0.arp_filter"
	arpFilterNet1  = "net.ipv4.conf.net1.arp_filter"
)

// The static pod's network, Multus's static-pod-nad.yml: a bridge with
// host-local leases, which the cluster removes when it stops.
const (
	staticNetwork = "testnet"
	staticBridge  = "testnet0"
)

var staticOnce sync.Once

// multusScenarios are Multus's e2e scripts, in its order, and the two chains
// of issue 33 (its test-subdirectory-chaining*.sh).
var multusScenarios = []struct {
	name string
	run  func(e *tenv)
}{
	{"simple-pod", simplePod},
	{"default-route1", defaultRoute1},
	{"simple-macvlan1", simpleMacvlan1},
	{"many-pods-deployment", manyPods},
	{"static-pod", staticPod},
	{"subdirectory-chaining", subdirectoryChain},
	{"auxiliary-chain", auxiliaryChain},
}

// TestMultusE2E runs Multus's e2e scenarios in thin and in thick mode, each
// mode installed once (with the auxiliary chain's name in its config, as
// docs/install.md's --additional-config sets it). After each scenario its
// pods are deleted and the node must hold nothing of them.
func TestMultusE2E(t *testing.T) {
	for _, mode := range []cluster.Mode{cluster.Thin, cluster.Thick} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newTenv(t)
			e.install(mode, imageV1, auxInstallerArg)
			for _, sc := range multusScenarios {
				t.Run(sc.name, func(t *testing.T) {
					se := *e
					se.t = t
					t.Cleanup(se.clearPods)
					sc.run(&se)
					se.clearPods()
					se.waitNoLeftovers()
				})
			}
			e.uninstall(mode)
		})
	}
}

// simplePod: test-simple-pod.sh, a pod that asks for no network. It gets the
// primary's eth0 alone, and its one network-status entry. The auxiliary
// chain's directory does not exist: eth0's arp_filter is the kernel's 0, the
// value the chain scenarios below must change.
func simplePod(e *tenv) {
	p := e.runPods(cluster.PodSpec(e.ns, "simple-centos1", nil))[0]
	n := e.podNet(p, arpFilterEth0)
	e.wantLinks(n, "eth0")
	if addr := e.wantAddrIn(n, "eth0", cluster.PrimarySubnet); addr != p.Status.PodIP {
		e.t.Errorf("eth0 has %s, status.podIP is %s", addr, p.Status.PodIP)
	}
	e.wantDefaultRoute(n, primaryDefault)
	e.wantSysctl(n, arpFilterEth0, "0")
	e.wantStatus(p, "eth0 "+cluster.PrimaryNetwork)
}

// macvlanNAD is a macvlan with static IPAM on the veth end that stands for
// the node's second NIC (Multus's eth1), its plugins after macvlan's.
func macvlanNAD(capabilities string, more string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","plugins":[{"type":"macvlan",%s"master":%q,"mode":"bridge",
		"ipam":{"type":"static"}}%s]}`, capabilities, greenParent, more)
}

// defaultRoute1: test-default-route1.sh. The NAD has no name and declares no
// capability, as Multus's; the pods ask for their address with "ips", and
// worker1 for its default route through net1 with "default-route": its only
// default route goes through 10.1.1.254 on net1. worker2 keeps eth0's.
func defaultRoute1(e *tenv) {
	e.nad("default-route-config", macvlanNAD("", ""))
	w1 := cluster.PodSpec(e.ns, "default-route-worker1", map[string]string{cluster.NetworksAnnotation: `[
		{"name":"default-route-config","ips":["10.1.1.21/24"],"default-route":["10.1.1.254"]}]`})
	w2 := cluster.PodSpec(e.ns, "default-route-worker2", map[string]string{cluster.NetworksAnnotation: `[
		{"name":"default-route-config","ips":["10.1.1.22/24"]}]`})
	pods := e.runPods(w1, w2)
	for i, want := range []struct{ addr, route string }{
		{"10.1.1.21/24", "default via 10.1.1.254 dev net1"},
		{"10.1.1.22/24", primaryDefault},
	} {
		n := e.podNet(pods[i])
		e.wantLinks(n, "eth0", "net1")
		e.wantLink(n, "net1", "macvlan", want.addr)
		e.wantAddrIn(n, "eth0", cluster.PrimarySubnet)
		e.wantDefaultRoute(n, want.route)
		e.wantRoute(n, "10.1.1.0/24 via - dev net1")
		e.wantStatus(pods[i], "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/default-route-config")
	}
}

// simpleMacvlan1: test-simple-macvlan1.sh. The NAD's macvlan declares the
// "ips" capability and chains tuning; each pod's net1 has the address it
// asked for, and the default route stays on eth0.
func simpleMacvlan1(e *tenv) {
	e.nad("macvlan1-config", macvlanNAD(`"capabilities":{"ips":true},`, `,{"type":"tuning"}`))
	var specs []*corev1.Pod
	addrs := []string{"10.1.1.11/24", "10.1.1.12/24"}
	for i, a := range addrs {
		specs = append(specs, cluster.PodSpec(e.ns, fmt.Sprintf("macvlan1-worker%d", i+1), map[string]string{
			cluster.NetworksAnnotation: fmt.Sprintf(`[{"name":"macvlan1-config","ips":[%q]}]`, a)}))
	}
	for i, p := range e.runPods(specs...) {
		n := e.podNet(p)
		e.wantLinks(n, "eth0", "net1")
		e.wantLink(n, "net1", "macvlan", addrs[i])
		e.wantDefaultRoute(n, primaryDefault)
		e.wantStatus(p, "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/macvlan1-config")
	}
}

// manyPods: Multus's many-pods.yml, a Deployment of 6 replicas, whose pods
// here ask for the blue bridge too: every replica runs with eth0 and net1,
// each with an address of its own.
func manyPods(e *tenv) {
	replicas := int32(6)
	labels := map[string]string{"app": "many"}
	tmpl := cluster.PodSpec(e.ns, "", map[string]string{cluster.NetworksAnnotation: "blue"})
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "simple-centos1", Namespace: e.ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmpl.Annotations},
				Spec:       tmpl.Spec,
			},
		},
	}
	if _, err := e.c.Clientset().AppsV1().Deployments(e.ns).Create(e.ctx(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	pods := e.waitReplicas("app=many", int(replicas))
	seen := map[string]string{}
	for _, p := range pods {
		n := e.podNet(p)
		e.wantLinks(n, "eth0", "net1")
		for _, a := range []string{e.wantAddrIn(n, "eth0", cluster.PrimarySubnet), e.wantAddrIn(n, "net1", "10.245.1.0/24")} {
			if other, dup := seen[a]; dup && a != "" {
				e.t.Errorf("pods %s and %s both have %s", other, p.Name, a)
			}
			seen[a] = p.Name
		}
		e.wantDefaultRoute(n, primaryDefault)
		e.wantStatus(p, "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/blue")
	}
}

// staticPod: test-static-pod.sh. A pod manifest in the kubelet's
// staticPodPath asks for Multus's bridge-nad; the pod (known to the API only
// by its mirror pod, under another UID) gets net1 with a lease of that
// bridge, and its mirror pod gets the network-status. Removing the manifest
// stops the pod, and its DEL leaves nothing.
func staticPod(e *tenv) {
	staticOnce.Do(func() { cluster.OwnNetwork(staticNetwork, staticBridge) })
	e.nad("bridge-nad", fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":"10.10.0.0/16"}}`, staticNetwork, staticBridge))
	spec := cluster.PodSpec(e.ns, "static-web", map[string]string{cluster.NetworksAnnotation: "bridge-nad"})
	spec.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	b, err := json.Marshal(spec)
	if err != nil {
		e.t.Fatal(err)
	}
	file := filepath.Join(e.c.Kubelet.StaticPodDir(), "static-web.yaml")
	e.t.Cleanup(func() { os.Remove(file) })
	// Written under a dot name, which the kubelet ignores, then renamed, so
	// that it never reads half a file.
	tmp := filepath.Join(filepath.Dir(file), ".static-web.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		e.t.Fatal(err)
	}
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "static-web-" + e.c.NodeName}}
	mirror, err = e.c.WaitRunning(e.ctx(), mirror, podWait)
	if err != nil {
		e.t.Fatal(err)
	}
	// The sandbox carries the static pod's own UID, which the mirror pod
	// names in this annotation.
	uid := mirror.Annotations["kubernetes.io/config.mirror"]
	if uid == "" || types.UID(uid) == mirror.UID {
		e.t.Fatalf("pod %s is not a mirror pod: annotations %v, UID %s", mirror.Name, mirror.Annotations, mirror.UID)
	}
	static := mirror.DeepCopy()
	static.UID = types.UID(uid)
	n := e.podNet(static)
	e.wantLinks(n, "eth0", "net1")
	e.wantLink(n, "net1", "veth", "")
	e.wantAddrIn(n, "net1", "10.10.0.0/16")
	e.wantAddrIn(n, "eth0", cluster.PrimarySubnet)
	e.wantDefaultRoute(n, primaryDefault)
	e.wantStatus(mirror, "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/bridge-nad")

	if err := os.Remove(file); err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(podWait)
	for {
		_, err := e.c.Clientset().CoreV1().Pods(e.ns).Get(e.ctx(), mirror.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("mirror pod %s still there %s after its manifest was removed (%v)", mirror.Name, podWait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeChain writes a tuning plugin's conf into /etc/cni/net.d/<dir>/, as
// Multus's cni-setup DaemonSet does, and removes the directory when the
// scenario ends, also on failure.
func (e *tenv) writeChain(dir string, sysctls map[string]string) {
	e.t.Helper()
	path := filepath.Join(cluster.ConfDir, dir)
	e.t.Cleanup(func() {
		if err := os.RemoveAll(path); err != nil {
			e.t.Errorf("remove %s: %v", path, err)
		}
	})
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "sysctltwiddle", "type": "tuning", "sysctl": sysctls})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "sysctltwiddle.conf"), conf, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// subdirectoryChain: test-subdirectory-chaining.sh. A tuning conf in the
// directory named after the primary network, /etc/cni/net.d/cbr0/, is
// chained to the primary, on its interface (IFNAME): eth0's arp_filter is
// 1. The pod asks for the blue bridge too, whose net1 does not get it.
func subdirectoryChain(e *tenv) {
	e.writeChain(cluster.PrimaryNetwork, map[string]string{"net.ipv4.conf.IFNAME.arp_filter": "1"})
	p := e.runPods(cluster.PodSpec(e.ns, "sysctl-modified", map[string]string{cluster.NetworksAnnotation: "blue"}))[0]
	n := e.podNet(p, arpFilterEth0, arpFilterNet1)
	e.wantLinks(n, "eth0", "net1")
	e.wantSysctl(n, arpFilterEth0, "1")
	e.wantSysctl(n, arpFilterNet1, "0")
	e.wantDefaultRoute(n, primaryDefault)
	e.wantStatus(p, "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/blue")
}

// auxiliaryChain: test-subdirectory-chaining-passthru.sh. The chain of
// auxiliaryCNIChainName, a tuning conf that names the pod's interfaces, runs
// after the pod's networks: eth0's and net1's arp_filter are 1. It makes no
// interface, no network-status entry and no event: manifold's events are
// counted once every event of the ADD is sure to be in (wantEventsOnceGone).
func auxiliaryChain(e *tenv) {
	if _, err := os.Stat(filepath.Join(cluster.ConfDir, cluster.PrimaryNetwork)); err == nil {
		e.t.Fatal("the primary's subdirectory chain is still there: it would set the sysctl this scenario checks")
	}
	e.writeChain(auxChain, map[string]string{arpFilterEth0: "1", arpFilterNet1: "1"})
	p := e.runPods(cluster.PodSpec(e.ns, "sysctl-modified-aux", map[string]string{cluster.NetworksAnnotation: "blue"}))[0]
	n := e.podNet(p, arpFilterEth0, arpFilterNet1)
	e.wantLinks(n, "eth0", "net1")
	e.wantSysctl(n, arpFilterEth0, "1")
	e.wantSysctl(n, arpFilterNet1, "1")
	e.wantDefaultRoute(n, primaryDefault)
	e.wantStatus(p, "eth0 "+cluster.PrimaryNetwork, "net1 "+e.ns+"/blue")
	e.wantEventsOnceGone(p, "Add eth0 ", "Add net1 ")
}

// wantEventsOnceGone deletes the pod, and once it is gone checks manifold's
// events on it: one AddedInterface whose message starts with each prefix,
// and no other event from manifold. A count taken while the pod runs could
// come before a late event: the daemon sends the events just after its ADD
// answers. Its DEL of the pod's sandbox waits for that write before it
// answers (docs/thick-mode.md), and the thin plugin sends them before its
// ADD answers, so once the kubelet has stopped the sandbox and the pod is
// gone, every event of the ADD is in the API.
func (e *tenv) wantEventsOnceGone(p *corev1.Pod, prefixes ...string) {
	e.t.Helper()
	if err := e.c.DeleteAndWait(e.ctx(), podWait, p); err != nil {
		e.t.Fatal(err)
	}
	var got []string
	for _, ev := range e.c.Events(e.ctx(), p) {
		if ev.Source.Component == "manifold" || ev.ReportingController == "manifold" {
			got = append(got, ev.Reason+": "+ev.Message)
		}
	}
	matched := 0
	for _, pre := range prefixes {
		n := 0
		for _, g := range got {
			if strings.HasPrefix(g, "AddedInterface: "+pre) {
				n++
			}
		}
		if n == 1 {
			matched++
		}
	}
	if len(got) != len(prefixes) || matched != len(prefixes) {
		e.t.Errorf("pod %s, once gone, has manifold's events %q; want one AddedInterface for each of %q, and no other", p.Name, got, prefixes)
	}
}
