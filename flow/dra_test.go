package flow

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
	"github.com/manifold-cni/manifold/scratch"
)

const nicDriver = "nic.example.com"

// draClaim is ResourceClaim default/<name>, allocated on node1 and reserved
// for pod default/p (UID u), one result per "request:device".
func draClaim(name string, results ...string) *k8sclient.ResourceClaim {
	rc := &k8sclient.ResourceClaim{}
	rc.Metadata.Namespace, rc.Metadata.Name, rc.Metadata.UID = "default", name, "uid-"+name
	rc.Status.Allocation = &k8sclient.ClaimAllocation{}
	if err := json.Unmarshal([]byte(`{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["node1"]}]}]}`), &rc.Status.Allocation.NodeSelector); err != nil {
		panic(err)
	}
	for _, r := range results {
		req, dev, _ := strings.Cut(r, ":")
		rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results, k8sclient.AllocationResult{Request: req, Driver: nicDriver, Pool: "node1", Device: dev})
	}
	rc.Status.ReservedFor = []k8sclient.ClaimConsumer{{Resource: "pods", Name: "p", UID: "u"}}
	return rc
}

// draSlice is node1's ResourceSlice of nicDriver: nic-<i> has PCI address
// 0000:03:00.<i> and interface ens<i>, except nic-9, which has neither.
func draSlice() k8sclient.ResourceSlice {
	s := k8sclient.ResourceSlice{}
	node := "node1"
	s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName = nicDriver, "node1", &node
	for _, i := range []string{"0", "1", "2"} {
		pci, ifname := "0000:03:00."+i, "ens"+i
		s.Spec.Devices = append(s.Spec.Devices, k8sclient.SliceDevice{Name: "nic-" + i, Attributes: map[string]k8sclient.DeviceAttribute{
			dra.AttrPCIBusID: {String: &pci}, "ifName": {String: &ifname},
		}})
	}
	s.Spec.Devices = append(s.Spec.Devices, k8sclient.SliceDevice{Name: "nic-9"})
	return s
}

// draPod is pod default/p on node1, with claim "nics" made from a template
// and claim "shared" naming ResourceClaim shared-nic.
func draPod() *k8sclient.Pod {
	return &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", NodeName: "node1", ResourceClaims: []k8sclient.PodResourceClaim{
		{Name: "nics", ClaimName: "p-nics-7xk2q"}, {Name: "shared", ClaimName: "shared-nic"},
	}}
}

func draAPI() *fakeAPI {
	return &fakeAPI{pod: draPod(), claims: map[string]*k8sclient.ResourceClaim{
		"default/p-nics-7xk2q": draClaim("p-nics-7xk2q", "vf:nic-1", "vf:nic-2", "pf:nic-0"),
		"default/shared-nic":   draClaim("shared-nic", "nic:nic-9"),
	}, slices: []k8sclient.ResourceSlice{draSlice()}}
}

// claimNet is a network from NAD default/<name> drawing from a claim: by
// resourceName (Multus's form) or by the precise annotation.
func claimNet(t *testing.T, name, resourceName, claim, ifname string) netconf.Attachment {
	t.Helper()
	a := netWith(t, name, resourceName, ifname)
	a.ResourceClaim = claim
	return a
}

// TestAssignClaims: networks that name a claim, by Multus's resourceName
// or the precise annotation, draw distinct devices of it; their plugins get
// the device's deviceID and pciBusID, or the keys the NAD maps; the record
// keeps the device; the claim and the slices are read once each, the pod
// not at all when it was read, and the kubelet is asked only for a device
// that no attribute names.
func TestAssignClaims(t *testing.T) {
	kubelet := podresourcestest.Start(t, podresourcestest.Pod{Namespace: "default", Name: "p", Containers: []podresourcestest.Container{{Name: "c",
		Claims: []podresourcestest.Claim{{Namespace: "default", Name: "shared-nic", Devices: []podresourcestest.ClaimDevice{{Driver: nicDriver, Pool: "node1", Device: "nic-9", CDI: []string{"example.com/nic=vf9"}}}}}}}})
	p := &Plugin{devices: inProcessKubelet}
	calls := func() int {
		return kubelet.Calls(podresourcestest.MethodGet) + kubelet.Calls(podresourcestest.MethodList)
	}

	t.Run("claims and requests", func(t *testing.T) {
		api := draAPI()
		pc := &podContext{api: api, pod: draPod(), podRead: true}
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "plain", "", "eth0"), claimNet(t, "any", "nics", "", "net1"), claimNet(t, "pf", "", "nics/pf", "net2"), claimNet(t, "keyed", "", "nics/vf", "net3")}
		atts[3].DeviceKeys = map[string]string{"device": "ifName"}
		if err := p.assignDevices(context.Background(), c, pc, atts); err != nil {
			t.Fatal(err)
		}
		// pf and the keyed vf pick first; "any" gets what is left.
		for i, want := range []struct{ device, deviceID, pci, ifName string }{
			{}, {"nic-2", "0000:03:00.2", "0000:03:00.2", ""}, {"nic-0", "0000:03:00.0", "0000:03:00.0", ""}, {"nic-1", "0000:03:00.1", "", "ens1"},
		} {
			a := atts[i]
			if want.device == "" {
				if a.Claim != nil || a.DeviceID != "" {
					t.Errorf("%s draws nothing, got %+v", a.DisplayName(), a.Claim)
				}
				continue
			}
			if a.Claim == nil || a.Claim.Device != want.device || a.Claim.Name != "p-nics-7xk2q" || a.Claim.UID != "uid-p-nics-7xk2q" || a.Claim.PodClaim != "nics" || a.Claim.PCIBusID != "0000:03:00."+want.device[4:] {
				t.Errorf("%s: claim device %+v, want %s of p-nics-7xk2q", a.DisplayName(), a.Claim, want.device)
				continue
			}
			if a.DeviceID != want.deviceID || a.RuntimeConfig[netconf.CapDeviceID] != want.deviceID {
				t.Errorf("%s: deviceID %q, runtimeConfig %v; want %s", a.DisplayName(), a.DeviceID, a.RuntimeConfig, want.deviceID)
			}
			if got := pluginKeys(t, a, "pciBusID"); got[0] != want.pci || got[1] != want.pci {
				t.Errorf("%s: plugins' pciBusID %v, want %q", a.DisplayName(), got, want.pci)
			}
			if got := pluginKeys(t, a, "device"); got[0] != want.ifName || got[1] != want.ifName {
				t.Errorf("%s: plugins' device %v, want %q", a.DisplayName(), got, want.ifName)
			}
			if want.ifName == "" && pluginKeys(t, a, "deviceID")[0] != want.deviceID {
				t.Errorf("%s: plugins' deviceID %v", a.DisplayName(), pluginKeys(t, a, "deviceID"))
			}
			if want.ifName != "" && pluginKeys(t, a, "deviceID")[0] != "stale" {
				t.Errorf("%s: the NAD's device keys name no deviceID, and the plugins' was changed: %v", a.DisplayName(), pluginKeys(t, a, "deviceID"))
			}
			if a.DeviceInfoFile == "" {
				t.Errorf("%s: no device info file", a.DisplayName())
			}
		}
		if !slices.Equal(api.claimReads, []string{"default/p-nics-7xk2q"}) || !slices.Equal(api.sliceLists, []string{nicDriver + "@node1"}) || api.podReads != 0 {
			t.Errorf("API reads: claims %v, slices %v, pods %d; want the one claim, the driver's slices on node1, no pod", api.claimReads, api.sliceLists, api.podReads)
		}
		if calls() != 0 {
			t.Errorf("the kubelet was asked %d times; every device has an attribute that names it", calls())
		}
	})

	t.Run("Multus form with the ResourceClaim's name, deviceID from the kubelet's CDI name", func(t *testing.T) {
		api := draAPI()
		pc := &podContext{api: api, pod: draPod(), podRead: true}
		atts := []netconf.Attachment{claimNet(t, "m", "shared-nic", "", "net1")}
		if err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), pc, atts); err != nil {
			t.Fatal(err)
		}
		if atts[0].Claim == nil || atts[0].Claim.Device != "nic-9" || atts[0].DeviceID != "vf9" || calls() != 1 {
			t.Errorf("got %+v (deviceID %q) after %d kubelet calls; want nic-9 as vf9, asked once", atts[0].Claim, atts[0].DeviceID, calls())
		}
	})

	t.Run("annotations from the runtime: the pod is read once", func(t *testing.T) {
		api := draAPI()
		pc := &podContext{api: api, pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
		atts := []netconf.Attachment{claimNet(t, "a", "", "nics/pf", "net1")}
		if err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), pc, atts); err != nil {
			t.Fatal(err)
		}
		if api.podReads != 1 || atts[0].Claim == nil || atts[0].Claim.Device != "nic-0" {
			t.Errorf("pod reads %d, device %+v; want one read and nic-0", api.podReads, atts[0].Claim)
		}
	})

	t.Run("annotations from the runtime, and the API has another pod of that name", func(t *testing.T) {
		api := draAPI()
		pc := &podContext{api: api, pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u-old"}}
		c := deviceCall(t, kubelet.Socket, "")
		c.pod.UID = "u-old"
		err := p.assignDevices(context.Background(), c, pc, []netconf.Attachment{claimNet(t, "a", "", "nics/pf", "net1")})
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "replaced") {
			t.Errorf("error %v, want code 7: the pod was replaced", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			atts   []netconf.Attachment
			api    func(*fakeAPI)
			code   uint
			saying []string
		}{
			{name: "too few devices", atts: []netconf.Attachment{claimNet(t, "a", "", "nics/pf", "net1"), claimNet(t, "b", "", "nics/pf", "net2")},
				code: 7, saying: []string{`request "pf" of claim "nics"`, "2 network(s)", "allocated 1", "default/a as net1", "default/b as net2"}},
			{name: "not a claim of the pod", atts: []netconf.Attachment{claimNet(t, "a", "nic", "", "net1")}, code: 7, saying: []string{`resourceName "nic"`, "nor is it a claim of the pod", "nics (ResourceClaim p-nics-7xk2q)"}},
			{name: "claim gone", atts: []netconf.Attachment{claimNet(t, "a", "", "shared", "net1")}, api: func(f *fakeAPI) { delete(f.claims, "default/shared-nic") }, code: 7, saying: []string{"shared-nic", "not found"}},
			{name: "claim reserved for another pod", atts: []netconf.Attachment{claimNet(t, "a", "", "shared", "net1")},
				api: func(f *fakeAPI) { f.claims["default/shared-nic"].Status.ReservedFor[0].UID = "x" }, code: 7, saying: []string{"not reserved for pod default/p"}},
			{name: "API down", atts: []netconf.Attachment{claimNet(t, "a", "", "shared", "net1")},
				api: func(f *fakeAPI) { f.claimErr = errors.Join(k8sclient.ErrUnavailable, errors.New("refused")) }, code: 11},
			{name: "explicit device of another pod", atts: func() []netconf.Attachment {
				a := claimNet(t, "a", "", "nics", "net1")
				a.DeviceID = "0000:99:00.0"
				return []netconf.Attachment{a}
			}(), code: 7, saying: []string{"0000:99:00.0", "not one of the devices"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				api := draAPI()
				if tc.api != nil {
					tc.api(api)
				}
				pc := &podContext{api: api, pod: draPod(), podRead: true}
				err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), pc, tc.atts)
				if netconf.Code(err) != tc.code {
					t.Fatalf("error %v, want code %d", err, tc.code)
				}
				for _, s := range tc.saying {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			})
		}
	})

	t.Run("no API server", func(t *testing.T) {
		err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), &podContext{}, []netconf.Attachment{claimNet(t, "a", "nics", "", "net1")})
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "DRA device") {
			t.Errorf("error %v, want code 7 saying the claims cannot be read", err)
		}
	})
}

// draAddDel runs ADD and then DEL of pod default/p in the binary, with a
// default network and NAD default/vf drawing request vf of claim nics; the
// noop plugin stands in for the delegates.
func draAddDel(t *testing.T, api *fakeAPI) (rec *scratch.Record, delErr error) {
	t.Helper()
	plugins := testenv.Plugins(t)
	dbg := filepath.Join(t.TempDir(), "noop.json")
	if err := (&debug.Debug{ReportResult: `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"0a:58:0a:09:00:09","sandbox":"/x"}],"ips":[{"address":"10.9.0.9/24","interface":0}]}`}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	api.nads = map[string]string{"default/vf": `{"cniVersion":"1.0.0","name":"vf","type":"noop","debugFile":"` + dbg + `"}`}
	api.nadAnnotations = map[string]map[string]string{"default/vf": {netconf.AnnotResourceClaim: "nics/vf"}}
	api.pod.Annotations = map[string]string{annotNetworks: "vf"}
	p := New()
	p.newAPI = func(*netconf.Config) (podAPI, error) { return api, nil }
	var out strings.Builder
	p.stdout = &out
	conf := testConf(t, map[string]any{"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "def", "type": "noop", "debugFile": dbg}}, "deviceInfoDir": t.TempDir()})
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/nonexistent/netns", IfName: "eth0", Path: plugins,
		Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u", StdinData: conf}
	if err := p.cmdAdd(args); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	var cfg struct{ CNIDir string }
	if err := json.Unmarshal(conf, &cfg); err != nil {
		t.Fatal(err)
	}
	rec, err := (&scratch.Store{Dir: cfg.CNIDir}).Load("c1")
	if err != nil || rec == nil {
		t.Fatalf("record after ADD: %v, %v", rec, err)
	}
	return rec, p.cmdDel(args)
}

// TestClaimStatusWriteBack: after ADD the claim's status.devices gets the
// attachment's entry, applied as the sandbox's field manager; the record
// keeps the device, so that DEL takes the entry back with no kubelet and no
// claim read.
func TestClaimStatusWriteBack(t *testing.T) {
	api := draAPI()
	rec, err := draAddDel(t, api)
	if err != nil {
		t.Fatalf("DEL: %v", err)
	}
	att := rec.Attachments[1]
	if att.Claim == nil || att.Claim.Name != "p-nics-7xk2q" || att.Claim.Device != "nic-1" || att.Claim.Request != "vf" || att.Claim.Driver != nicDriver || att.Claim.UID != "uid-p-nics-7xk2q" {
		t.Fatalf("recorded claim device %+v", att.Claim)
	}
	if len(api.applies) != 2 {
		t.Fatalf("applies %+v, want one on ADD and one on DEL", api.applies)
	}
	add, del := api.applies[0], api.applies[1]
	if add.claim != "default/p-nics-7xk2q" || add.uid != "uid-p-nics-7xk2q" || add.manager != "manifold/c1" || add.force || len(add.devices) != 1 {
		t.Fatalf("ADD's apply %+v", add)
	}
	e := add.devices[0]
	if e.Driver != nicDriver || e.Pool != "node1" || e.Device != "nic-1" || e.NetworkData == nil || e.NetworkData.InterfaceName != "net1" ||
		!slices.Equal(e.NetworkData.IPs, []string{"10.9.0.9/24"}) || e.NetworkData.HardwareAddress != "0a:58:0a:09:00:09" ||
		len(e.Conditions) != 1 || e.Conditions[0].Type != "Ready" || e.Conditions[0].Status != "True" {
		t.Errorf("entry %+v (networkData %+v)", e, e.NetworkData)
	}
	if del.claim != add.claim || del.manager != add.manager || len(del.devices) != 0 {
		t.Errorf("DEL's apply %+v, want the same claim and manager, and no devices", del)
	}
	if len(api.claimReads) != 1 {
		t.Errorf("claim reads %v, want only ADD's", api.claimReads)
	}
}

// TestClaimStatusConflicts: fields the driver owns are left to it, and the
// rest applied again; a write that fails is a Warning event, and the ADD
// still succeeds.
func TestClaimStatusConflicts(t *testing.T) {
	field := `.status.devices[device="nic-1",driver="` + nicDriver + `",pool="node1"].networkData`
	t.Run("the driver owns networkData", func(t *testing.T) {
		api := draAPI()
		api.applyErrs = []error{&k8sclient.ApplyConflict{Causes: []k8sclient.ConflictCause{{Manager: "nic-driver", Field: field}}}}
		if _, err := draAddDel(t, api); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if len(api.applies) != 3 {
			t.Fatalf("applies %+v, want ADD's twice and DEL's", api.applies)
		}
		again := api.applies[1]
		if again.force || len(again.devices) != 1 || again.devices[0].NetworkData != nil || len(again.devices[0].Conditions) != 1 {
			t.Errorf("second apply %+v, want the Ready condition alone, not forced", again)
		}
	})
	t.Run("an earlier sandbox owns it", func(t *testing.T) {
		api := draAPI()
		api.applyErrs = []error{&k8sclient.ApplyConflict{Causes: []k8sclient.ConflictCause{{Manager: "manifold/c0", Field: field}}}}
		if _, err := draAddDel(t, api); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if again := api.applies[1]; !again.force || again.devices[0].NetworkData == nil {
			t.Errorf("second apply %+v, want the whole entry, forced", again)
		}
	})
	t.Run("the write fails", func(t *testing.T) {
		api := draAPI()
		api.applyErrs = []error{errors.New("HTTP 403: forbidden"), errors.New("HTTP 503: down")}
		if _, err := draAddDel(t, api); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		var warnings []string
		for _, e := range api.events {
			if strings.HasPrefix(e, "Warning "+reasonClaimStatus) {
				warnings = append(warnings, e)
			}
		}
		if len(warnings) != 2 || !strings.Contains(warnings[0], "p-nics-7xk2q") || !strings.Contains(warnings[0], "403") || !strings.Contains(warnings[1], "not released") {
			t.Errorf("events %v, want a Warning for the write and one for the release", api.events)
		}
	})
}
