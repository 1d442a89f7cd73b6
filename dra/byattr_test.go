package dra

import (
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// byAttr is a request by the NAD's resourceName: with a domain, it names no
// claim; without one, it is Multus's form, a claim's name first.
func byAttr(i int, resourceName string) Request {
	r := Request{Index: i, Network: "ns/net" + string(rune('a'+i)), IfName: "net" + string(rune('1'+i)), Attr: resourceName}
	if !netconf.IsDevicePluginResource(resourceName) {
		r.Ref, r.Multus = netconf.ClaimRef{Claim: resourceName}, true
	}
	return r
}

// sriovSlices publishes the devices as the SR-IOV DRA driver does in its
// MULTUS mode: a resourceName and a deviceID (the VF's PCI address).
func sriovSlices(devs map[string][2]string) *Slices {
	attrs := map[string]map[string]string{}
	for name, v := range devs {
		attrs[name] = map[string]string{AttrCNIResourceName: v[0], AttrCNIDeviceID: v[1], AttrPCIBusID: v[1]}
	}
	return slicesOf(1, attrs)
}

// TestAssignByAttribute: a NAD's resourceName, with or without a domain,
// draws the pod's DRA devices whose k8s.cni.cncf.io/resourceName equals it,
// across all its claims, in the order of their deviceIDs, and hands each
// its k8s.cni.cncf.io/deviceID.
func TestAssignByAttribute(t *testing.T) {
	pod := &Pod{Namespace: "ns", Name: "p", UID: "u", Claims: []k8sclient.PodResourceClaim{
		{Name: "sriov1", ClaimName: "p-sriov1-x"}, {Name: "sriov2", ClaimName: "p-sriov2-y"}, {Name: "gpu", ClaimName: "p-gpu-z"},
	}}
	sl := sriovSlices(map[string][2]string{
		"vf-3": {"openshift.io/host-device-net", "0000:08:00.3"},
		"vf-2": {"openshift.io/host-device-net", "0000:08:00.2"},
		"vf-7": {"sriov_nic_2", "0000:08:02.7"},
	})
	s1 := claimOf("p-sriov1-x", "vf:vf-3", "vf:vf-2")
	s2 := claimOf("p-sriov2-y", "vf:vf-7")
	gpu := claimOf("p-gpu-z", "gpu:gpu-0") // no attributes: not a network's

	t.Run("what is read", func(t *testing.T) {
		names, err := pod.ClaimsToRead([]Request{byAttr(0, "openshift.io/host-device-net")})
		if err != nil || strings.Join(names, ",") != "p-sriov1-x,p-sriov2-y,p-gpu-z" {
			t.Errorf("claims to read %v, %v; want all the pod's, in its order", names, err)
		}
		names, err = pod.ClaimsToRead([]Request{byAttr(0, "sriov1")})
		if err != nil || strings.Join(names, ",") != "p-sriov1-x" {
			t.Errorf("a resourceName that is a claim's name: %v, %v; want only that claim", names, err)
		}
	})

	t.Run("with a domain", func(t *testing.T) {
		reqs := []Request{byAttr(0, "openshift.io/host-device-net"), byAttr(1, "openshift.io/host-device-net")}
		devs, err := Assign(pod, reqs, claimsOf(s1, s2, gpu), sl, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"0000:08:00.2", "0000:08:00.3"} { // by deviceID, not by allocation order
			if devs[i].DeviceID != want || devs[i].Keys["deviceID"] != want || devs[i].PodClaim != "sriov1" || devs[i].Name != "p-sriov1-x" {
				t.Errorf("%s: %+v, want deviceID %s of claim sriov1", reqs[i].String(), devs[i], want)
			}
		}
	})

	t.Run("without a domain", func(t *testing.T) {
		devs, err := Assign(pod, []Request{byAttr(0, "sriov_nic_2")}, claimsOf(s1, s2, gpu), sl, nil)
		if err != nil {
			t.Fatal(err)
		}
		if devs[0].Device != "vf-7" || devs[0].DeviceID != "0000:08:02.7" || devs[0].PodClaim != "sriov2" {
			t.Errorf("got %+v, want vf-7 of claim sriov2, deviceID 0000:08:02.7", devs[0])
		}
	})

	t.Run("a claim's name goes first", func(t *testing.T) {
		// sriov2 is the name of a claim of the pod: Multus v4.3.0's form,
		// even though vf-3 says it is of resource sriov2.
		sl := sriovSlices(map[string][2]string{"vf-3": {"sriov2", "0000:08:00.3"}, "vf-2": {"x.io/y", "0000:08:00.2"}, "vf-7": {"z", "0000:08:02.7"}})
		devs, err := Assign(pod, []Request{byAttr(0, "sriov2")}, claimsOf(s1, s2, gpu), sl, nil)
		if err != nil || devs[0].Device != "vf-7" {
			t.Errorf("got %+v, %v; want vf-7, the device of claim sriov2", devs, err)
		}
	})

	t.Run("distinct from the claims' own networks", func(t *testing.T) {
		// One network names claim sriov1 precisely, one draws by
		// attribute: the claim's network picks first, and takes vf-3.
		precise := req(1, "sriov1/vf", false)
		precise.DeviceID = "0000:08:00.3"
		devs, err := Assign(pod, []Request{byAttr(0, "openshift.io/host-device-net"), precise}, claimsOf(s1, s2, gpu), sl, nil)
		if err != nil || devs[0].Device != "vf-2" || devs[1].Device != "vf-3" {
			t.Errorf("got %+v, %v; want vf-2 by attribute, vf-3 by claim", devs, err)
		}
	})

	t.Run("explicit deviceID", func(t *testing.T) {
		r := byAttr(0, "openshift.io/host-device-net")
		r.DeviceID = "0000:08:00.3"
		devs, err := Assign(pod, []Request{byAttr(1, "openshift.io/host-device-net"), r}, claimsOf(s1, s2, gpu), sl, nil)
		if err != nil || devs[1].Device != "vf-3" || devs[0].Device != "vf-2" {
			t.Errorf("got %+v, %v; want the explicit vf-3, and vf-2 for the other", devs, err)
		}
		r.DeviceID = "0000:08:02.7" // the pod's, but of another resourceName
		_, err = Assign(pod, []Request{r}, claimsOf(s1, s2, gpu), sl, nil)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), `deviceID "0000:08:02.7" is not one of the devices of resourceName "openshift.io/host-device-net"`) {
			t.Errorf("a device of another resourceName: %v, want code 7", err)
		}
	})

	t.Run("no match", func(t *testing.T) {
		r := byAttr(0, "intel.com/sriov_vf")
		r.PluginDevices = []string{"0000:05:00.1"}
		_, err := Assign(pod, []Request{r, byAttr(1, "intel.com/sriov_vf")}, claimsOf(s1, s2, gpu), sl, nil)
		if netconf.Code(err) != 7 {
			t.Fatalf("error %v, want code 7", err)
		}
		for _, s := range []string{`resourceName "intel.com/sriov_vf" of pod ns/p`, "3 network(s)", `the pod has no DRA device whose k8s.cni.cncf.io/resourceName is "intel.com/sriov_vf"`, "the kubelet gave it 1 device-plugin device(s) of that resource, which other networks took (0000:05:00.1)"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
		_, err = Assign(pod, []Request{byAttr(0, "nic")}, claimsOf(s1, s2, gpu), sl, nil)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "nor is it a claim of the pod (its claims: sriov1 (ResourceClaim p-sriov1-x)") {
			t.Errorf("a name with no domain that is neither: %v, want code 7 saying so", err)
		}
	})

	t.Run("too few", func(t *testing.T) {
		reqs := []Request{byAttr(0, "sriov_nic_2"), byAttr(1, "sriov_nic_2")}
		_, err := Assign(pod, reqs, claimsOf(s1, s2, gpu), sl, nil)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "2 network(s) draw a device of it (ns/neta as net1, ns/netb as net2)") || !strings.Contains(err.Error(), "the pod has 1 DRA device(s) whose k8s.cni.cncf.io/resourceName is \"sriov_nic_2\", or that its extended-resource claim serves under that name ("+drv+"/node1/vf-7)") {
			t.Errorf("two networks, one device: %v", err)
		}
	})
}

// TestAssignExtendedResource: a pod's extended resource that DRA serves
// (status.extendedResourceClaimStatus) is a resourceName of the devices of
// the requests mapped to it, whatever their attributes.
func TestAssignExtendedResource(t *testing.T) {
	pod := &Pod{Namespace: "ns", Name: "p", UID: "u", Extended: &k8sclient.ExtendedResourceClaim{ClaimName: "p-extended-resources-q",
		Mappings: []k8sclient.ExtendedResourceRequest{
			{Container: "app", Resource: "example.com/sriov-port1", Request: "container-0-request-0"},
			{Container: "app", Resource: "example.com/sriov-port2", Request: "container-0-request-1"},
			{Container: "side", Resource: "example.com/sriov-port1", Request: "container-1-request-0"},
		}}}
	ext := claimOf("p-extended-resources-q", "container-0-request-0:vf-1", "container-0-request-1:vf-2", "container-1-request-0:vf-0")
	sl := slicesOf(1, map[string]map[string]string{
		"vf-0": {AttrPCIBusID: "0000:08:00.5"}, "vf-1": {AttrPCIBusID: "0000:08:00.4"}, "vf-2": {AttrPCIBusID: "0000:08:02.2"},
	})
	names, err := pod.ClaimsToRead([]Request{byAttr(0, "example.com/sriov-port1")})
	if err != nil || strings.Join(names, ",") != "p-extended-resources-q" {
		t.Fatalf("claims to read %v, %v; want the extended-resource claim", names, err)
	}
	reqs := []Request{byAttr(0, "example.com/sriov-port1"), byAttr(1, "example.com/sriov-port2"), byAttr(2, "example.com/sriov-port1")}
	devs, err := Assign(pod, reqs, claimsOf(ext), sl, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"vf-1", "vf-2", "vf-0"} {
		if devs[i].Device != want || devs[i].PodClaim != "" || devs[i].Name != "p-extended-resources-q" {
			t.Errorf("%s: %+v, want %s of the extended-resource claim", reqs[i].String(), devs[i], want)
		}
	}
	if devs[0].DeviceID != "0000:08:00.4" {
		t.Errorf("deviceID %q, want the PCI address 0000:08:00.4 (ordered by deviceID)", devs[0].DeviceID)
	}
	if _, err := Assign(pod, []Request{byAttr(0, "example.com/other")}, claimsOf(ext), sl, nil); netconf.Code(err) != 7 {
		t.Errorf("an extended resource the pod was not given: %v, want code 7", err)
	}
}
