package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestChainsFromFiles: the three chains that come from files on the node,
// with a real API server and the real tuning plugin.
//   - The cluster network's conflist gets the tuning conf of the directory
//     named after its network (libcni >= 1.3): eth0 has arp_filter=1.
//   - A NAD with an empty spec.config is the conflist of that name in
//     confDir, with its own directory's chain: net1 has arp_filter=1.
//   - auxiliaryCNIChainName runs the directory of that name next to the
//     cluster network's file after both, on net2, which it does not create:
//     eth0's arp_announce is 2, and the pod's network-status and
//     AddedInterface events are those of eth0 and net1 only.
//
// Every file is removed before DEL, which still runs every chained plugin
// from the record and leaves nothing behind.
func TestChainsFromFiles(t *testing.T) {
	e := newEnv(t)
	s := nextSubnet()
	clusterDir := filepath.Dir(e.clusterPath)
	files := map[string]string{
		filepath.Join(clusterDir, clusterName, "10-tune.conf"): `{"cniVersion":"1.0.0","name":"x","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}}`,
		filepath.Join(e.confDir, "20-stored.conflist"):         fmt.Sprintf(`{"cniVersion":"1.0.0","name":"stored","plugins":[{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, e.parent, s, e.leaseDir),
		filepath.Join(e.confDir, "stored", "10-tune.conf"):     `{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}}`,
		filepath.Join(clusterDir, "vendor-chain", "10.conf"):   `{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_announce":"2"}}`,
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		e.writeFile(p, body)
	}
	e.nad(e.ns, "stored", "")
	pod := e.pod(e.ns, map[string]string{annotNetworks: "stored"})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(map[string]any{"auxiliaryCNIChainName": "vendor-chain"})

	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/stored", ifname: "net1", subnet: s}})
	for key, want := range map[string]string{
		"net.ipv4.conf.eth0.arp_filter":   "1",
		"net.ipv4.conf.net1.arp_filter":   "1",
		"net.ipv4.conf.eth0.arp_announce": "2",
	} {
		if got := testenv.NetnsSysctl(t, box.netns, key); got != want {
			t.Errorf("%s = %s in the pod, want %s from the chained tuning", key, got, want)
		}
	}

	for _, d := range []string{filepath.Join(clusterDir, clusterName), filepath.Join(e.confDir, "stored"), filepath.Join(clusterDir, "vendor-chain")} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// TestCapabilityLeftOut: a pod that asks for portMappings on a network whose
// plugins do not declare the capability runs, as under Multus, with the
// network and without the value, and gets a Warning CapabilityNotDeclared
// that names the request, the capability and the network; with
// strictCapabilities the same pod is refused with code 7.
func TestCapabilityLeftOut(t *testing.T) {
	e := newEnv(t)
	s := nextSubnet()
	e.nad(e.ns, "mv", e.macvlanConf("", s))
	annotation := `[{"name":"mv","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"TCP"}]}]`

	pod := e.pod(e.ns, map[string]string{annotNetworks: annotation})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)
	res := e.mustAdd(conf, box)
	e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/mv", ifname: "net1", subnet: s}})
	warns := eventsOf(e.events(pod), corev1.EventTypeWarning, "CapabilityNotDeclared")
	if len(warns) != 1 {
		t.Fatalf("Warning CapabilityNotDeclared events: %v, want one", eventMessages(warns))
	}
	for _, part := range []string{e.ns + "/mv (net1)", `"portMappings"`, "macvlan"} {
		if !strings.Contains(warns[0].Message, part) {
			t.Errorf("event %q does not name %q", warns[0].Message, part)
		}
	}
	e.mustDel(conf, box)
	e.checkNothingLeft(box)

	strict := e.pod(e.ns, map[string]string{annotNetworks: annotation})
	sbox := e.sandboxFor(strict)
	strictConf := e.manifoldConf(map[string]any{"strictCapabilities": true})
	if _, err := e.add(strictConf, sbox); err == nil || !strings.Contains(err.Error(), "portMappings") {
		t.Fatalf("ADD with strictCapabilities: %v, want a refusal naming portMappings", err)
	}
	e.checkRefused(sbox, e.ns+"/mv", "portMappings")
}
