package e2e

// concurrentAttachments end to end, thin and thick: the pod's network-status,
// events, interfaces and clean-up are those of an ADD in order (the same
// checks as TestThickMode's), and a failing network among the ones attached
// at once leaves nothing behind, with the same Warning event and no status.
// That they really run at once is shown in the privileged tier
// (cmd/manifold, TestConcurrentAttachmentsRealPlugins).

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
)

func TestConcurrentAttachments(t *testing.T) {
	for _, thick := range []bool{false, true} {
		name := "thin"
		if thick {
			name = "thick"
		}
		t.Run(name, func(t *testing.T) { concurrentAttachments(t, thick) })
	}
}

func concurrentAttachments(t *testing.T, thick bool) {
	e := newThickEnv(t, false, thick)
	on := map[string]any{"concurrentAttachments": true}
	conf := e.manifoldConf(on)
	add, del := e.env.mustAdd, e.env.mustDel
	newSandbox := e.sandboxFor
	if thick {
		conf = e.thickConf(on)
		add, del = e.mustAdd, e.mustDel
		newSandbox = func(p *corev1.Pod) *sandbox { return e.thickSandbox(p, conf) }
	}
	sm, sb, sm2 := nextSubnet(), nextSubnet(), nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", sm))
	e.bridgeNAD("br", sb)
	e.nad(e.ns, "mv2", e.macvlanConf("", sm2))
	e.nad(e.ns, "ghost", `{"cniVersion":"1.0.0","type":"no-such-plugin"}`)

	pod := e.pod(e.ns, map[string]string{annotNetworks: "mv, br, mv2"})
	box := newSandbox(pod)
	res := add(conf, box)
	if thick {
		e.waitReported(pod, 4)
	}
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/mv", ifname: "net1", subnet: sm},
		{name: e.ns + "/br", ifname: "net2", subnet: sb},
		{name: e.ns + "/mv2", ifname: "net3", subnet: sm2},
	})
	del(conf, box)
	e.checkNothingLeft(box)

	failing := e.pod(e.ns, map[string]string{annotNetworks: "mv, ghost, br"})
	box = newSandbox(failing)
	_, err := e.addWith(conf, box, thick)
	if err == nil || !strings.Contains(err.Error(), "ghost") || !strings.Contains(err.Error(), "no-such-plugin") {
		t.Fatalf("ADD = %v, want an error naming the NAD ghost and its plugin", err)
	}
	e.checkRefused(box, "ghost")
	del(conf, box)
	e.checkNothingLeft(box)
}

// addWith is an ADD through the shim (thick) or the binary.
func (e *thickEnv) addWith(conf *libcni.NetworkConfigList, sb *sandbox, thick bool) (any, error) {
	if thick {
		return e.add(conf, sb)
	}
	return e.env.add(conf, sb)
}
