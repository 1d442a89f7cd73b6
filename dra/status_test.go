package dra

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

func TestEntry(t *testing.T) {
	var prefixes []string
	for i := range 20 {
		prefixes = append(prefixes, fmt.Sprintf("10.0.0.%d/24", i), fmt.Sprintf("10.0.0.%d/24", i))
	}
	a := Attached{Device: netconf.ClaimDevice{Driver: drv, Pool: "node1", Device: "nic-3", ShareID: "s1"}, Network: "ns/sriov", IfName: "net1",
		Prefixes: prefixes, MAC: "0a:58:0a:00:00:05"}
	e := Entry(a, "ns/p", time.Date(2026, 5, 1, 10, 0, 0, 0, time.FixedZone("x", 3600)))
	if e.Driver != drv || e.Pool != "node1" || e.Device != "nic-3" || e.ShareID == nil || *e.ShareID != "s1" {
		t.Errorf("keys %+v", e)
	}
	nd := e.NetworkData
	if nd == nil || nd.InterfaceName != "net1" || nd.HardwareAddress != "0a:58:0a:00:00:05" || len(nd.IPs) != 16 || nd.IPs[1] != "10.0.0.1/24" {
		t.Errorf("networkData %+v, want net1, the MAC and the first 16 distinct addresses", nd)
	}
	if len(e.Conditions) != 1 {
		t.Fatalf("conditions %+v", e.Conditions)
	}
	c := e.Conditions[0]
	if c.Type != "Ready" || c.Status != "True" || c.Reason != ReasonAttached || c.LastTransitionTime != "2026-05-01T09:00:00Z" ||
		!strings.Contains(c.Message, "ns/p") || !strings.Contains(c.Message, "net1") || !strings.Contains(c.Message, "ns/sriov") {
		t.Errorf("condition %+v", c)
	}
}

func TestFieldManager(t *testing.T) {
	short := FieldManager("abc123")
	if short != "manifold/abc123" || !IsManifoldManager(short) {
		t.Errorf("FieldManager(abc123) = %q", short)
	}
	long := strings.Repeat("a", 200)
	m := FieldManager(long)
	if len(m) > 128 || !IsManifoldManager(m) || m == FieldManager(strings.Repeat("a", 199)+"b") {
		t.Errorf("FieldManager of a 200-character ID = %q (%d), want at most 128 characters and distinct", m, len(m))
	}
	if IsManifoldManager("nic.example.com") || IsManifoldManager("kubelet") {
		t.Error("a driver's manager taken for manifold's")
	}
}

// TestResolveConflicts: a part another writer owns is left to it, a part
// only an earlier sandbox of manifold's owns is taken over (force), and an
// entry with nothing left is not applied.
func TestResolveConflicts(t *testing.T) {
	entry := func(dev string) k8sclient.DeviceStatus {
		return Entry(Attached{Device: netconf.ClaimDevice{Driver: drv, Pool: "node1", Device: dev}, IfName: "net1"}, "ns/p", time.Now())
	}
	path := func(dev, rest string) string {
		return fmt.Sprintf(`.status.devices[device=%q,driver=%q,pool="node1"]%s`, dev, drv, rest)
	}
	entries := []k8sclient.DeviceStatus{entry("nic-0"), entry("nic-1"), entry("nic-2")}
	res := Resolve(entries, []k8sclient.ConflictCause{
		{Manager: "nic-driver", Field: path("nic-0", ".networkData.interfaceName")},
		{Manager: "nic-driver", Field: path("nic-0", ".networkData.ips")},
		{Manager: "manifold/old-sandbox", Field: path("nic-1", ".networkData.interfaceName")},
		{Manager: "nic-driver", Field: path("nic-2", ".networkData")},
		{Manager: "nic-driver", Field: path("nic-2", `.conditions[type="Ready"].status`)},
	})
	if !res.Force {
		t.Error("Force unset: what is left conflicts only with manifold's own sandboxes")
	}
	if len(res.Entries) != 2 || res.Entries[0].Device != "nic-0" || res.Entries[0].NetworkData != nil || len(res.Entries[0].Conditions) != 1 ||
		res.Entries[1].Device != "nic-1" || res.Entries[1].NetworkData == nil {
		t.Errorf("entries %+v; want nic-0 with its condition only, nic-1 whole, no nic-2", res.Entries)
	}
	kept := strings.Join(res.Kept, "; ")
	for _, s := range []string{"nic-0 networkData (owned by nic-driver)", "nic-2 networkData", "nic-2 condition Ready"} {
		if !strings.Contains(kept, s) {
			t.Errorf("kept %q does not say %q", kept, s)
		}
	}
	if strings.Contains(kept, "nic-1") {
		t.Errorf("kept %q names nic-1, which manifold takes over", kept)
	}
}

// TestResolveForeignOnly: conflicts with the driver alone drop its parts
// and do not force what is left.
func TestResolveForeignOnly(t *testing.T) {
	e := Entry(Attached{Device: netconf.ClaimDevice{Driver: drv, Pool: "node1", Device: "nic-0"}, IfName: "net1"}, "ns/p", time.Now())
	res := Resolve([]k8sclient.DeviceStatus{e}, []k8sclient.ConflictCause{
		{Manager: "nic-driver", Field: fmt.Sprintf(`.status.devices[device="nic-0",driver=%q,pool="node1"].networkData.ips`, drv)},
		{Manager: "manifold/other", Field: `.status.devices[device="nic-9",driver="x",pool="y"].networkData`}, // not one of ours
	})
	if res.Force || len(res.Entries) != 1 || res.Entries[0].NetworkData != nil || len(res.Entries[0].Conditions) != 1 {
		t.Errorf("resolution %+v; want the condition alone, not forced", res)
	}
}
