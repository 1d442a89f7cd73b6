package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// bridgeMarkerRes is the extended resource that KubeVirt's bridge-marker
// puts on a node for bridge br1: no device plugin serves it, so the
// kubelet lists no device of it for any pod.
const bridgeMarkerRes = "bridge.network.kubevirt.io/br1"

// TestUnlistedResourceAttachesWithoutDevice: a NAD whose resourceName the
// kubelet does not list for the pod at all (KubeVirt's bridge-marker,
// ovs-cni's marker) attaches with no device, as under Multus, with a warning
// in the log and, with the pod known, a Normal event; the same from the
// kubelet's checkpoint, and with no API server. A resource that the kubelet
// lists, but with too few devices, still fails with code 7. Before, every
// such pod failed with code 7.
func TestUnlistedResourceAttachesWithoutDevice(t *testing.T) {
	pod := podresourcestest.Pod{Namespace: "default", Name: "p", UID: "u", Containers: []podresourcestest.Container{
		{Name: "a", Devices: []podresourcestest.Device{{Resource: "intel.com/vf", ID: "0000:03:02.1"}}},
	}}
	kubelet := podresourcestest.Start(t, pod)
	cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	podresourcestest.WriteCheckpoint(t, cp, podresourcestest.CheckpointNUMA, pod)
	p := &Plugin{devices: inProcessKubelet, now: time.Now}
	for name, sources := range map[string][2]string{
		"PodResources": {kubelet.Socket, ""},
		"checkpoint":   {filepath.Join(t.TempDir(), "absent.sock"), cp},
	} {
		for _, withAPI := range []bool{true, false} {
			t.Run(name+map[bool]string{true: " with API", false: " without API"}[withAPI], func(t *testing.T) {
				c := deviceCall(t, sources[0], sources[1])
				var logs bytes.Buffer
				c.log = newTestLogger(&logs)
				pc := &podContext{}
				api := &fakeAPI{pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
				if withAPI {
					pc = &podContext{api: api, pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
				}
				atts := []netconf.Attachment{netWith(t, "plain", "", "eth0"), netWith(t, "br1", bridgeMarkerRes, "net1"),
					netWith(t, "ovs", "ovs-cni.network.kubevirt.io/br1", "net2"), netWith(t, "vf", "intel.com/vf", "net3")}
				if err := p.assignDevices(context.Background(), c, pc, atts); err != nil {
					t.Fatalf("assignDevices: %v", err)
				}
				for _, a := range atts[1:3] {
					if a.DeviceID != "" || a.Claim != nil || a.NoDeviceOf != a.Resource || a.RuntimeConfig[netconf.CapDeviceID] != nil {
						t.Errorf("%s: deviceID %q, claim %v, NoDeviceOf %q, runtimeConfig %v; want no device", a.DisplayName(), a.DeviceID, a.Claim, a.NoDeviceOf, a.RuntimeConfig)
					}
					if got := pluginKeys(t, a, "deviceID"); got[0] != "stale" || got[1] != "" {
						t.Errorf("%s: plugins' deviceID %v; want the NAD's own, untouched", a.DisplayName(), got)
					}
					if !strings.Contains(logs.String(), a.Resource) || !strings.Contains(logs.String(), `"level":"WARN"`) {
						t.Errorf("no warning naming %s in the log:\n%s", a.Resource, logs.String())
					}
				}
				if atts[3].DeviceID != "0000:03:02.1" || atts[3].NoDeviceOf != "" {
					t.Errorf("net3: deviceID %q, NoDeviceOf %q; want the kubelet's device", atts[3].DeviceID, atts[3].NoDeviceOf)
				}
				if !withAPI {
					return
				}
				results := make([]types.Result, len(atts))
				for i := range results {
					results[i] = &types100.Result{CNIVersion: "1.0.0", Interfaces: []*types100.Interface{{Name: atts[i].IfName, Sandbox: "/x"}}}
				}
				p.report(context.Background(), c, pc, atts, results, nil)
				var normal []string
				for _, e := range api.events {
					if strings.HasPrefix(e, "Normal "+ReasonAttachedWithoutDevice+" ") {
						normal = append(normal, e)
					}
				}
				if len(normal) != 2 || !strings.Contains(normal[0]+normal[1], bridgeMarkerRes) || !strings.Contains(normal[0]+normal[1], "default/ovs (net2)") {
					t.Errorf("events %q; want one Normal %s for each of net1 and net2", api.events, ReasonAttachedWithoutDevice)
				}
			})
		}
	}

	t.Run("listed but short", func(t *testing.T) {
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "vf1", "intel.com/vf", "net1"), netWith(t, "vf2", "intel.com/vf", "net2")}
		err := p.assignDevices(context.Background(), c, &podContext{}, atts)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "intel.com/vf") {
			t.Fatalf("error %v, want code 7 naming intel.com/vf", err)
		}
	})

	t.Run("an explicit deviceID of an unlisted resource", func(t *testing.T) {
		// The pod named a device the kubelet did not give it: refused, as
		// before; only "any device" may go without one.
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "br1", bridgeMarkerRes, "net1")}
		atts[0].DeviceID = "0000:09:00.1"
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); netconf.Code(err) != 7 {
			t.Fatalf("error %v, want code 7", err)
		}
	})

	t.Run("a DRA device of the name still serves it", func(t *testing.T) {
		api := sriovAPI()
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "hd", hostDeviceNet, "net1")}
		pc := &podContext{api: api, pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
		if err := p.assignDevices(context.Background(), c, pc, atts); err != nil || atts[0].DeviceID != "0000:08:00.2" || atts[0].NoDeviceOf != "" {
			t.Fatalf("error %v, deviceID %q, NoDeviceOf %q; want the DRA device 0000:08:00.2", err, atts[0].DeviceID, atts[0].NoDeviceOf)
		}
	})
}

// TestEventsAsMultusWritesThem: the AddedInterface message is Multus's
// "Add net1 [10.1.1.11/24 fd00::11/64] from default/macvlan" (before, the
// addresses were joined by commas); a result with no interface and no
// address gets no AddedInterface event, as under Multus; a missing NAD's
// Warning has Multus's reason NoNetworkFound (before, ErrorAddingInterface);
// a pod in kube-system gets its network-status (before, none).
func TestEventsAsMultusWritesThem(t *testing.T) {
	res := &types100.Result{CNIVersion: "1.0.0", Interfaces: []*types100.Interface{{Name: "net1", Sandbox: "/x"}}}
	for _, cidr := range []string{"10.1.1.11/24", "fd00::11/64"} {
		ip, err := types.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		res.IPs = append(res.IPs, &types100.IPConfig{Address: *ip})
	}
	if got, want := addedInterfaceMessage("net1", res, "default/macvlan"), "Add net1 [10.1.1.11/24 fd00::11/64] from default/macvlan"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got, want := addedInterfaceMessage("net2", &types100.Result{CNIVersion: "1.0.0"}, "default/x"), "Add net2 [] from default/x"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}

	p := &Plugin{now: time.Now}
	c := deviceCall(t, "/nonexistent.sock", "")
	api := &fakeAPI{}
	pc := &podContext{api: api, pod: &k8sclient.Pod{Namespace: "kube-system", Name: "coredns-1", UID: "u"}}
	atts := []netconf.Attachment{netWith(t, "a", "", "eth0"), netWith(t, "b", "", "net1")}
	p.report(context.Background(), c, pc, atts, []types.Result{res, &types100.Result{CNIVersion: "1.0.0"}}, nil)
	if len(api.events) != 1 || !strings.HasPrefix(api.events[0], "Normal AddedInterface Add eth0 [10.1.1.11/24 fd00::11/64] from default/a") {
		t.Errorf("events %q; want one AddedInterface, for eth0 (net1's plugin returned nothing)", api.events)
	}
	if len(api.statuses) != 1 {
		t.Fatalf("status patches %v; want one for the pod in kube-system", api.statuses)
	}
	var st []map[string]any
	if err := json.Unmarshal([]byte(api.statuses[0]), &st); err != nil || len(st) != 2 {
		t.Fatalf("status %s (%v)", api.statuses[0], err)
	}
	if dns, ok := st[1]["dns"].(map[string]any); !ok || len(dns) != 0 {
		t.Errorf("status entry %v: want \"dns\": {}", st[1])
	}

	api.events = nil
	notFound := &noNetworkError{netconf.Invalid("network default/gone: NetworkAttachmentDefinition not found")}
	p.warnEvent(context.Background(), c, pc, errors.Join(errors.New("add"), notFound))
	p.warnEvent(context.Background(), c, pc, netconf.Invalid("something else"))
	if want := []string{"Warning NoNetworkFound add\nnetwork default/gone: NetworkAttachmentDefinition not found", "Warning ErrorAddingInterface something else"}; !slices.Equal(api.events, want) {
		t.Errorf("events %q, want %q", api.events, want)
	}
	if netconf.Code(notFound) != 7 {
		t.Errorf("a missing NAD is code %d, want 7", netconf.Code(notFound))
	}
}

// TestConfigWarningsAtEveryLevel: a config problem that a call works
// around is logged at the default level (error) too, and the call's other
// warnings are not.
func TestConfigWarningsAtEveryLevel(t *testing.T) {
	conf, err := netconf.ParseConfig([]byte(`{"cniVersion":"1.0.0","clusterNetwork":"calico","logLevel":"trace"}`))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log, closeLog := newLogger(conf, &buf, nil)
	defer closeLog()
	log = log.With("cmd", "ADD")
	logConfigWarnings(log, conf)
	log.Warn("another warning")
	log.Info("some info")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `trace`) || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], `"cmd":"ADD"`) {
		t.Errorf("log:\n%s\nwant the one config warning, naming trace, with the call's keys", buf.String())
	}
}

// newTestLogger logs JSON lines at every level into w.
func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
