package flow

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

const hostDeviceNet = "openshift.io/host-device-net"

// sriovAPI is an API server with pod default/p, whose claim "sriov" holds
// two VFs that the SR-IOV DRA driver published with the attributes Multus
// reads: resourceName openshift.io/host-device-net and their PCI address as
// deviceID.
func sriovAPI() *fakeAPI {
	pod := &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", NodeName: "node1", ResourceClaims: []k8sclient.PodResourceClaim{{Name: "sriov", ClaimName: "p-sriov-4kz"}}}
	s := k8sclient.ResourceSlice{}
	node := "node1"
	s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName = nicDriver, "node1", &node
	for _, vf := range []string{"3", "2"} {
		name, pci, res := "vf-"+vf, "0000:08:00."+vf, hostDeviceNet
		s.Spec.Devices = append(s.Spec.Devices, k8sclient.SliceDevice{Name: name, Attributes: map[string]k8sclient.DeviceAttribute{
			dra.AttrCNIResourceName: {String: &res}, dra.AttrCNIDeviceID: {String: &pci},
		}})
	}
	return &fakeAPI{pod: pod, claims: map[string]*k8sclient.ResourceClaim{
		"default/p-sriov-4kz": draClaim("p-sriov-4kz", "vf:vf-3", "vf:vf-2"),
	}, slices: []k8sclient.ResourceSlice{s}}
}

// TestAssignByResourceName: a NAD's resourceName with a domain that is no
// device plugin's resource of the pod draws the pod's DRA devices whose
// k8s.cni.cncf.io/resourceName says so, and hands on their
// k8s.cni.cncf.io/deviceID (before, the pod failed with code 7). The
// kubelet's devices of that resource go first; a pod they cover reads
// nothing from the API server.
func TestAssignByResourceName(t *testing.T) {
	kubelet := podresourcestest.Start(t, podresourcestest.Pod{Namespace: "default", Name: "p", UID: "u", Containers: []podresourcestest.Container{
		{Name: "a", Devices: []podresourcestest.Device{{Resource: hostDeviceNet, ID: "0000:05:00.1"}}},
	}})
	empty := podresourcestest.Start(t)
	p := &Plugin{devices: inProcessKubelet}
	// The annotations came from the runtime: the pod was not read.
	notRead := func(api *fakeAPI) *podContext {
		return &podContext{api: api, pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
	}

	t.Run("by attribute", func(t *testing.T) {
		api := sriovAPI()
		atts := []netconf.Attachment{netWith(t, "plain", "", "eth0"), netWith(t, "hd1", hostDeviceNet, "net1"), netWith(t, "hd2", hostDeviceNet, "net2")}
		if err := p.assignDevices(context.Background(), deviceCall(t, empty.Socket, ""), notRead(api), atts); err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"", "0000:08:00.2", "0000:08:00.3"} { // by deviceID
			a := atts[i]
			if want == "" {
				continue
			}
			if a.Claim == nil || a.Claim.Name != "p-sriov-4kz" || a.Claim.PodClaim != "sriov" || a.DeviceID != want || a.RuntimeConfig[netconf.CapDeviceID] != want {
				t.Errorf("%s: claim %+v, deviceID %q, runtimeConfig %v; want deviceID %s from claim sriov", a.DisplayName(), a.Claim, a.DeviceID, a.RuntimeConfig, want)
				continue
			}
			if got := pluginKeys(t, a, "deviceID"); !slices.Equal(got, []string{want, want}) {
				t.Errorf("%s: plugins' deviceID %v, want %s", a.DisplayName(), got, want)
			}
			if got := pluginKeys(t, a, "pciBusID"); got[0] != "" {
				t.Errorf("%s: plugins' pciBusID %v, want none (the device has no standard PCI attribute)", a.DisplayName(), got)
			}
		}
		if api.podReads != 1 || !slices.Equal(api.claimReads, []string{"default/p-sriov-4kz"}) || len(api.sliceLists) != 1 {
			t.Errorf("reads: pod %d, claims %v, slices %v; want the pod, its one claim, one slice list", api.podReads, api.claimReads, api.sliceLists)
		}
	})

	t.Run("the device plugin's first", func(t *testing.T) {
		api := sriovAPI()
		atts := []netconf.Attachment{netWith(t, "plain", "", "eth0"), netWith(t, "hd1", hostDeviceNet, "net1"), netWith(t, "hd2", hostDeviceNet, "net2")}
		if err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), notRead(api), atts); err != nil {
			t.Fatal(err)
		}
		if atts[1].Claim != nil || atts[1].DeviceID != "0000:05:00.1" || pluginKeys(t, atts[1], "pciBusID")[0] != "0000:05:00.1" {
			t.Errorf("net1: claim %+v, deviceID %q; want the kubelet's 0000:05:00.1", atts[1].Claim, atts[1].DeviceID)
		}
		if atts[2].Claim == nil || atts[2].DeviceID != "0000:08:00.2" {
			t.Errorf("net2: claim %+v, deviceID %q; want the DRA device 0000:08:00.2", atts[2].Claim, atts[2].DeviceID)
		}
	})

	t.Run("an explicit DRA device beside the device plugin's", func(t *testing.T) {
		api := sriovAPI()
		atts := []netconf.Attachment{netWith(t, "hd1", hostDeviceNet, "net1"), netWith(t, "hd2", hostDeviceNet, "net2")}
		atts[0].DeviceID = "0000:08:00.3"
		if err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), notRead(api), atts); err != nil {
			t.Fatal(err)
		}
		if atts[0].Claim == nil || atts[0].Claim.Device != "vf-3" || atts[1].Claim != nil || atts[1].DeviceID != "0000:05:00.1" {
			t.Errorf("got %+v / %q and %+v / %q; want vf-3 by its deviceID, and the kubelet's device", atts[0].Claim, atts[0].DeviceID, atts[1].Claim, atts[1].DeviceID)
		}
	})

	t.Run("covered by the device plugin: no API reads", func(t *testing.T) {
		api := sriovAPI()
		atts := []netconf.Attachment{netWith(t, "hd1", hostDeviceNet, "net1")}
		if err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), notRead(api), atts); err != nil {
			t.Fatal(err)
		}
		if atts[0].DeviceID != "0000:05:00.1" || api.podReads != 0 || len(api.claimReads) != 0 || len(api.sliceLists) != 0 {
			t.Errorf("deviceID %q, reads: pod %d, claims %v, slices %v; want the kubelet's device and no reads", atts[0].DeviceID, api.podReads, api.claimReads, api.sliceLists)
		}
	})

	t.Run("a kubelet that cannot answer", func(t *testing.T) {
		// No socket and no checkpoint: the pod's DRA devices of the name
		// still serve it; a pod they do not serve gets the kubelet's error.
		absent := filepath.Join(t.TempDir(), "absent")
		atts := []netconf.Attachment{netWith(t, "hd1", hostDeviceNet, "net1")}
		if err := p.assignDevices(context.Background(), deviceCall(t, absent+".sock", absent), notRead(sriovAPI()), atts); err != nil || atts[0].DeviceID != "0000:08:00.2" {
			t.Errorf("error %v, deviceID %q; want the DRA device 0000:08:00.2", err, atts[0].DeviceID)
		}
		atts = []netconf.Attachment{netWith(t, "a", "intel.com/sriov_vf", "net1")}
		err := p.assignDevices(context.Background(), deviceCall(t, absent+".sock", absent), notRead(sriovAPI()), atts)
		if netconf.Code(err) != 11 || !strings.Contains(err.Error(), "ask the kubelet") {
			t.Errorf("error %v, want code 11 with the kubelet's error", err)
		}
	})

	t.Run("neither", func(t *testing.T) {
		// The kubelet lists no device of the resource, and the pod has no
		// DRA device of it: attached without a device, as under Multus
		// (TestUnlistedResourceAttachesWithoutDevice).
		api := sriovAPI()
		atts := []netconf.Attachment{netWith(t, "a", "intel.com/sriov_vf", "net1")}
		err := p.assignDevices(context.Background(), deviceCall(t, kubelet.Socket, ""), notRead(api), atts)
		if err != nil || atts[0].DeviceID != "" || atts[0].NoDeviceOf != "intel.com/sriov_vf" {
			t.Fatalf("error %v, deviceID %q, NoDeviceOf %q; want no device", err, atts[0].DeviceID, atts[0].NoDeviceOf)
		}
	})
}
