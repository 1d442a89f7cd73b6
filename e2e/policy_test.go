package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// Scenario 4: a NAD in another namespace is allowed without
// namespaceIsolation, refused with it (code 7, nothing attached, not even the
// pod's own-namespace network), and allowed again once that namespace is in
// globalNamespaces.
func TestNamespaceIsolation(t *testing.T) {
	e := newEnv(t)
	other := e.namespace("e2e-other-")
	sa, sc := nextSubnet(), nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	e.nad(other, "c", e.macvlanConf("", sc))
	annotations := map[string]string{annotNetworks: "a, " + other + "/c"}
	wants := []want{
		e.clusterWant(),
		{name: e.ns + "/a", ifname: "net1", subnet: sa},
		{name: other + "/c", ifname: "net2", subnet: sc},
	}
	allowed := func(t *testing.T, extra map[string]any) {
		e := e.sub(t)
		conf := e.manifoldConf(extra)
		pod := e.pod(e.ns, annotations)
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, wants)
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	}

	t.Run("no isolation", func(t *testing.T) { allowed(t, nil) })

	t.Run("isolation", func(t *testing.T) {
		e := e.sub(t)
		conf := e.manifoldConf(map[string]any{"namespaceIsolation": true})
		pod := e.pod(e.ns, annotations)
		box := e.sandboxFor(pod)
		_, err := e.add(conf, box)
		wantCode(t, err, 7, other+"/c", "namespaceIsolation", e.ns+"/"+pod.Name)
		e.checkRefused(box, other+"/c")
	})

	t.Run("isolation, namespace is global", func(t *testing.T) {
		allowed(t, map[string]any{"namespaceIsolation": true, "globalNamespaces": "default, " + other})
	})
}

// Scenario 5: a missing NAD or an invalid annotation fails ADD with code 7
// and a message that names the culprit and the pod; nothing is attached, and
// the pod gets a Warning event. A delegate that fails after another one
// worked is rolled back the same way.
func TestRefusedAnnotations(t *testing.T) {
	e := newEnv(t)
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	e.nad(e.ns, "broken", fmt.Sprintf(`{"cniVersion":"1.0.0","type":"macvlan","master":"nosuchlink0",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, nextSubnet(), e.leaseDir))
	conf := e.manifoldConf(nil)

	for _, tc := range []struct {
		name, annotation string
		code             uint
		names            []string // what the error and the event must name
	}{
		{"missing NAD", "a, nope", 7, []string{"nope"}},
		{"missing NAD in another namespace", "a, elsewhere/nope", 7, []string{"elsewhere/nope"}},
		{"bad name", "a, Bad_Name", 7, []string{"Bad_Name"}},
		{"bad mac", `[{"name":"a","mac":"not-a-mac"}]`, 7, []string{"mac", "not-a-mac"}},
		{"bad ip", `[{"name":"a","ips":["10.0.0.300/24"]}]`, 7, []string{"ips", "10.0.0.300/24"}},
		{"bad interface", `[{"name":"a","interface":"much-too-long-ifname"}]`, 7, []string{"interface", "much-too-long-ifname"}},
		{"bad json", `[{"name":"a"`, 7, []string{"networks annotation", "JSON"}},
		{"interface taken", "a@net2, a", 7, []string{"net2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			pod := e.pod(e.ns, map[string]string{annotNetworks: tc.annotation})
			box := e.sandboxFor(pod)
			_, err := e.add(conf, box)
			wantCode(t, err, tc.code, append([]string{e.ns + "/" + pod.Name}, tc.names...)...)
			e.checkRefused(box, tc.names...)
		})
	}

	t.Run("delegate fails after another attached", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "a, broken"})
		box := e.sandboxFor(pod)
		_, err := e.add(conf, box)
		var te *types.Error
		if !errors.As(err, &te) {
			t.Fatalf("ADD error = %v, want a CNI error", err)
		}
		if te.Code == 0 {
			t.Errorf("ADD error has code 0: %q", te.Msg)
		}
		wantCode(t, err, te.Code, e.ns+"/"+pod.Name, e.ns+"/broken", "net2")
		e.checkRefused(box, e.ns+"/broken")
		if got := filesMentioning(t, e.leaseDir, box.ContainerID, true); len(got) != 0 {
			t.Errorf("leases after rollback = %v, want none", got)
		}
	})
}

// Scenario 6: the default-network override annotation replaces the cluster
// network (looked up in multusNamespace); defaultNetworks (a NAD there and a
// config in confDir) are attached to every pod after it, except pods in a
// system namespace.
func TestDefaultNetworks(t *testing.T) {
	e := newEnv(t)
	altBridge := testenv.UniqueName("mfalt")
	t.Cleanup(func() { testenv.DeleteLink(altBridge) })
	salt, sextra, sfile, sa := nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet()
	e.nad(e.sysNS, "alt", e.bridgeConflist("alt-net", altBridge, salt))
	e.nad(e.sysNS, "extra", e.macvlanConf("", sextra))
	e.writeFile(filepath.Join(e.confDir, "extra-file.conf"), e.macvlanConf("extra-file", sfile))
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	conf := e.manifoldConf(map[string]any{"defaultNetworks": []string{"extra", "extra-file"}})
	clusterWant := e.clusterWant()
	extraWants := []want{
		{name: e.sysNS + "/extra", ifname: "net1", subnet: sextra},
		{name: "extra-file", ifname: "net2", subnet: sfile},
	}

	t.Run("defaultNetworks", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, nil)
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, append([]want{clusterWant}, extraWants...))
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	})

	t.Run("override and networks", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotDefaultNetwork: "alt", annotNetworks: "a"})
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, append(append([]want{
			{name: e.sysNS + "/alt", ifname: "eth0", subnet: salt, gateway: []string{salt.IP(1)}, dns: []string{salt.IP(53)}},
		}, extraWants...), want{name: e.ns + "/a", ifname: "net3", subnet: sa}))
		if got := testenv.BridgePorts(t, altBridge); len(got) != 1 {
			t.Errorf("ports on the override's bridge = %v, want 1", got)
		}
		if got := testenv.BridgePorts(t, e.bridge); len(got) != 0 {
			t.Errorf("ports on the cluster network's bridge = %v, want none: the override replaces it", got)
		}
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
		if got := testenv.BridgePorts(t, altBridge); len(got) != 0 {
			t.Errorf("ports on the override's bridge after DEL = %v, want none", got)
		}
	})

	t.Run("override names two networks", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotDefaultNetwork: "alt, extra"})
		box := e.sandboxFor(pod)
		_, err := e.add(conf, box)
		wantCode(t, err, 7, "default-network annotation", e.ns+"/"+pod.Name)
		e.checkRefused(box, "default-network annotation")
	})

	t.Run("system namespace", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.sysNS, map[string]string{annotNetworks: "extra"})
		box := e.sandboxFor(pod)
		e.mustAdd(conf, box)
		l := links(t, box.netns)
		names := sorted(keys(l))
		if !slices.Equal(names, []string{"eth0", "net1"}) {
			t.Errorf("interfaces = %v, want eth0 and net1 only: no defaultNetworks in a system namespace", names)
		}
		if !e.cluster.Contains(l["eth0"].addrs[0].IP) || !sextra.Contains(l["net1"].addrs[0].IP) {
			t.Errorf("eth0 %s / net1 %s, want addresses in %s / %s", l["eth0"].addrString(), l["net1"].addrString(), e.cluster, sextra)
		}
		// Its network-status is written, as Multus v4.3.0 writes it (its
		// systemNamespaces check compares the pod's name).
		if st, ok := e.status(pod); !ok || len(st) != 2 || st[0].Interface != "eth0" || st[1].Name != e.sysNS+"/extra" {
			t.Errorf("pod in a system namespace: network-status %+v (present %v), want eth0 and %s/extra", st, ok, e.sysNS)
		}
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	})
}

// Scenario 8: the runtime names a pod that the API server does not have.
// After podWaitTimeout, the pod gets only its default network, and ADD
// succeeds.
func TestPodNotFound(t *testing.T) {
	e := newEnv(t)
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	conf := e.manifoldConf(nil)
	ghost := testenv.UniqueName("ghost-")
	box := e.sandboxNamed(e.ns, ghost, "6a7d9b54-0000-4000-8000-"+randomID()[:12], nil)

	start := time.Now()
	res := e.mustAdd(conf, box)
	took := time.Since(start)
	if took < podWaitTimeout {
		t.Errorf("ADD took %s, less than podWaitTimeout %s: it did not wait for the pod", took, podWaitTimeout)
	}
	if bound := podWaitTimeout + 3*apiTimeout + 5*time.Second; took > bound {
		t.Errorf("ADD took %s, more than %s", took, bound)
	}
	l := links(t, box.netns)
	if names := sorted(keys(l)); !slices.Equal(names, []string{"eth0"}) {
		t.Errorf("interfaces = %v, want only eth0", names)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != l["eth0"].addrString() || !e.cluster.Contains(res.IPs[0].Address.IP) {
		t.Errorf("result IPs = %v, want eth0's address in %s", res.IPs, e.cluster)
	}
	evs, err := e.k8s.CoreV1().Events(e.ns).List(e.ctx(), listByName(ghost))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 0 {
		t.Errorf("events for a pod that does not exist: %v", eventMessages(evs.Items))
	}
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// A pod replaced under the same name, as a StatefulSet does. ADD for the new
// pod, at once, must attach the new pod's networks and write its status. Then a
// sandbox of the old pod is ADDed:
//   - with a runtime that passes no pod annotations, the pod is read, and the
//     first read comes from the API server's watch cache, which may still hold
//     the old pod. The ADD must be refused (code 7), with nothing attached;
//   - with one that passes them, the sandbox comes with the old pod's
//     annotations and UID, so its ADD attaches the old pod's networks, which is
//     what that sandbox asked for (the kubelet tears it down). It must not write
//     the old pod's status onto the replacement: the status patch is
//     conditional on the old UID, and the API server refuses it.
func TestReplacedPod(t *testing.T) {
	for _, older := range []bool{true, false} {
		name := "pod annotations from the runtime"
		if older {
			name = "older runtime"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			sa, sb := nextSubnet(), nextSubnet()
			e.nad(e.ns, "a", e.macvlanConf("", sa))
			e.nad(e.ns, "b", e.macvlanConf("", sb))
			conf := e.manifoldConf(nil)
			old, created := e.replacePod(map[string]string{annotNetworks: "a"}, map[string]string{annotNetworks: "b"})

			box := e.sandboxFor(created)
			stale := e.sandboxFor(old)
			if older {
				box.olderRuntime()
				stale.olderRuntime()
			}
			res := e.mustAdd(conf, box)
			e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/b", ifname: "net1", subnet: sb}})

			_, err := e.add(conf, stale)
			if older {
				wantCode(t, err, 7, string(old.UID), string(created.UID), "replaced")
			} else {
				e.checkStaleSandbox(stale, err, sa, old, created)
				e.mustDel(conf, stale)
			}
			e.mustDel(conf, box)
			// Both sandboxes share the cluster bridge: check once both are gone.
			e.checkNothingLeft(stale)
			e.checkNothingLeft(box)
		})
	}
}

// checkStaleSandbox checks a replaced pod's sandbox after its ADD (err): the
// old pod's network attached, the replacement's status still its own, and the
// refused status patch in manifold's log.
func (e *env) checkStaleSandbox(stale *sandbox, err error, sa subnet, old, created *corev1.Pod) {
	t := e.t
	t.Helper()
	if err != nil {
		t.Fatalf("ADD of the old pod's sandbox: %v", err)
	}
	if l := links(t, stale.netns); len(l) != 2 || l["net1"].addrs == nil || !sa.Contains(l["net1"].addrs[0].IP) {
		t.Errorf("old pod's sandbox: interfaces %v, want eth0 and net1 in %s", l, sa)
	}
	st, ok := e.status(created)
	if !ok || len(st) != 2 || st[1].Name != e.ns+"/b" {
		t.Errorf("replacement's network-status = %+v, want its own (%s/b on net1)", st, e.ns)
	}
	logs, err := os.ReadFile(e.logFile)
	if err != nil {
		t.Fatal(err)
	}
	refused := slices.ContainsFunc(strings.Split(string(logs), "\n"), func(l string) bool {
		return strings.Contains(l, "write network status") && strings.Contains(l, "metadata.uid") && strings.Contains(l, string(old.UID))
	})
	if !refused {
		t.Errorf("manifold's log does not show the status patch refused for UID %s", old.UID)
	}
}

// replacePod creates a pod, deletes it at once and creates another of the same
// name, as a StatefulSet does; it returns both.
func (e *env) replacePod(oldAnnotations, newAnnotations map[string]string) (old, created *corev1.Pod) {
	t := e.t
	t.Helper()
	old = e.pod(e.ns, oldAnnotations)
	zero := int64(0)
	if err := e.k8s.CoreV1().Pods(e.ns).Delete(e.ctx(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	replacement := old.DeepCopy()
	replacement.ObjectMeta = metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace, Annotations: newAnnotations}
	var err error
	// The delete is immediate, but the name can take a moment to be free.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		created, err = e.k8s.CoreV1().Pods(e.ns).Create(e.ctx(), replacement, metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("create the replacement pod: %v", err)
	}
	if created.UID == old.UID {
		t.Fatalf("the replacement has the old UID %s", old.UID)
	}
	return old, created
}
