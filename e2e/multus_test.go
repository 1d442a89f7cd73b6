package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/manifold-cni/manifold/internal/testenv"
	corev1 "k8s.io/api/core/v1"
)

// TestMultusTakeover: a pod that Multus attached before manifold took the
// node over, with clusterNetwork naming a NAD in the system namespace and
// two NADs of the pod's own (a 0.3.1 single conf, and a conflist with static
// IPs and a MAC from the annotation), all on the real API server. Multus's
// record and libcni cache are written as Multus v4.3.0 writes them
// (testenv.MultusAttach; ../shared/fixtures/multus-v4.3.0), the cluster
// network's record copy having lost its plugins' own fields. manifold, with
// no record of its own, tears every attachment down from them, by DEL and
// separately by GC, and removes Multus's files; a valid pod is untouched.
func TestMultusTakeover(t *testing.T) {
	e := newEnv(t)
	sv, sl := nextSubnet(), nextSubnet()
	clusterConf := e.bridgeConflist("k8s-pod-network", e.bridge, e.cluster)
	e.nad(e.sysNS, "k8s-pod-network", clusterConf)
	vlanConf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":"macvlan-conf","type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, e.parent, sv, e.leaseDir)
	e.nad(e.ns, "macvlan-conf", vlanConf)
	listConf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bridge-list","plugins":[
		{"type":"macvlan","master":%q,"mode":"bridge","capabilities":{"ips":true},"ipam":{"type":"static"}},
		{"type":"tuning","capabilities":{"mac":true}}]}`, e.parent)
	e.nad(e.ns, "bridge-list", listConf)
	multusDir := t.TempDir()
	conf := e.manifoldConf(map[string]any{"clusterNetwork": "k8s-pod-network", "multusCNIDir": multusDir})
	conf.CNIVersion = "1.1.0" // GC is CNI 1.1; libcni injects the list's version
	entries := func() []testenv.MultusEntry {
		return []testenv.MultusEntry{
			{Conf: clusterConf, Name: "k8s-pod-network", Reencoded: true, WithConfigList: true},
			{Conf: vlanConf, Name: e.ns + "/macvlan-conf"},
			{Conf: listConf, Name: e.ns + "/bridge-list", IfName: "data0", MAC: "02:11:22:33:44:55", IPs: []string{sl.CIDR(7)}},
		}
	}
	multusFiles := func(id string) []string {
		return filesMentioning(t, multusDir, id, false)
	}

	t.Run("DEL", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "macvlan-conf, bridge-list@data0"})
		sb := e.sandboxFor(pod)
		testenv.MultusAttach(t, e.rt.BinDir, multusDir, sb.Pod, entries())
		if got := linkNames(t, sb.netns); len(got) != 4 {
			t.Fatalf("links after Multus's ADD = %v, want lo, eth0, net1, data0", got)
		}
		e.mustDel(conf, sb)
		e.checkNothingLeft(sb)
		if got := multusFiles(sb.ContainerID); len(got) != 0 {
			t.Errorf("Multus's files left: %v", got)
		}
		e.mustDel(conf, sb) // the runtime's second DEL
	})

	t.Run("GC", func(t *testing.T) {
		e := e.sub(t)
		gone := e.sandboxFor(e.pod(e.ns, map[string]string{annotNetworks: "macvlan-conf"}))
		testenv.MultusAttach(t, e.rt.BinDir, multusDir, gone.Pod, entries()[:2])
		kept := e.sandboxFor(e.pod(e.ns, map[string]string{annotNetworks: "macvlan-conf"}))
		testenv.MultusAttach(t, e.rt.BinDir, multusDir, kept.Pod, entries()[:2])
		valid := []types.GCAttachment{{ContainerID: kept.ContainerID, IfName: "eth0"}}
		if err := e.rt.CNI.GCNetworkList(e.ctx(), conf, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		// The valid pod's port is still on the cluster bridge: the stale
		// pod's links and leases are checked alone.
		if got := linkNames(t, gone.netns); len(got) != 1 {
			t.Errorf("links of the stale pod after GC = %v, want only lo", got)
		}
		if got := filesMentioning(t, e.leaseDir, gone.ContainerID, true); len(got) != 0 {
			t.Errorf("leases of the stale pod after GC = %v", got)
		}
		if got := multusFiles(gone.ContainerID); len(got) != 0 {
			t.Errorf("Multus's files of the stale pod left: %v", got)
		}
		if got := linkNames(t, kept.netns); len(got) != 3 {
			t.Errorf("links of the valid pod after GC = %v, want lo, eth0, net1", got)
		}
		if got := multusFiles(kept.ContainerID); len(got) == 0 {
			t.Error("GC removed Multus's files of a valid pod")
		}
		e.mustDel(conf, kept)
		e.checkNothingLeft(kept)
	})
	t.Run("an entry neither source explains", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "macvlan-conf, bridge-list@data0"})
		sb := e.sandboxFor(pod)
		broken := entries()
		broken[1].Garbage = true // the record's config is unreadable, and the cache has none
		testenv.MultusAttach(t, e.rt.BinDir, multusDir, sb.Pod, broken)
		err := e.rt.Del(e.ctx(), conf, sb.Pod)
		record := filepath.Join(multusDir, sb.ContainerID)
		if err == nil {
			t.Fatal("DEL succeeded, leaving net1 behind")
		}
		for _, want := range []string{e.ns + "/macvlan-conf", sb.ContainerID, record} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("DEL error %q does not name %q", err, want)
			}
		}
		if got := linkNames(t, sb.netns); !slices.Equal(got, []string{"lo", "net1"}) {
			t.Errorf("links after the failed DEL = %v, want lo and the unexplained net1 only: the rest is removed first", got)
		}
		warns := eventsOf(e.events(pod), corev1.EventTypeWarning, "ErrorDeletingInterface")
		if len(warns) == 0 || !strings.Contains(warns[0].Message, "macvlan-conf") {
			t.Errorf("Warning events %v, want one naming the network left behind", eventMessages(warns))
		}
		if _, err := os.Stat(record); err != nil {
			t.Errorf("the record that names what is left was removed: %v", err)
		}
		// What the admin does by hand: remove the interface and the record.
		_ = os.Remove(record)
		for _, f := range filesMentioning(t, multusDir, sb.ContainerID, false) {
			_ = os.Remove(f)
		}
	})
	if entries, _ := os.ReadDir(filepath.Join(multusDir, "results")); len(entries) != 0 {
		t.Errorf("Multus's cache entries left: %d", len(entries))
	}
}
