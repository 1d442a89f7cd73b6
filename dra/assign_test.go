package dra

import (
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

const drv = "nic.example.com"

func str(s string) *string { return &s }

// claimOf is an allocated ResourceClaim ns/name reserved for pod p (uid u),
// with one result per "request:device".
func claimOf(name string, results ...string) *k8sclient.ResourceClaim {
	rc := &k8sclient.ResourceClaim{}
	rc.Metadata.Namespace, rc.Metadata.Name, rc.Metadata.UID = "ns", name, "uid-"+name
	rc.Status.Allocation = &k8sclient.ClaimAllocation{}
	for _, r := range results {
		req, dev, _ := strings.Cut(r, ":")
		rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results,
			k8sclient.AllocationResult{Request: req, Driver: drv, Pool: "node1", Device: dev})
	}
	rc.Status.ReservedFor = []k8sclient.ClaimConsumer{{Resource: "pods", Name: "p", UID: "u"}}
	return rc
}

// slicesOf is one ResourceSlice of pool node1 whose devices have the given
// attributes (name: attribute name: value).
func slicesOf(gen int64, devs map[string]map[string]string) *Slices {
	s := k8sclient.ResourceSlice{}
	s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Pool.Generation = drv, "node1", gen
	for name, attrs := range devs {
		d := k8sclient.SliceDevice{Name: name, Attributes: map[string]k8sclient.DeviceAttribute{}}
		for k, v := range attrs {
			d.Attributes[k] = k8sclient.DeviceAttribute{String: str(v)}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return NewSlices([]k8sclient.ResourceSlice{s})
}

var testPod = &Pod{Namespace: "ns", Name: "p", UID: "u", Claims: []k8sclient.PodResourceClaim{
	{Name: "nics", ClaimName: "p-nics-abc12"},
	{Name: "gpu", ClaimName: "shared-gpu"},
}}

func req(i int, ref string, multus bool) Request {
	claim, request, _ := strings.Cut(ref, "/")
	return Request{Index: i, Network: "ns/net" + string(rune('a'+i)), IfName: "net" + string(rune('1'+i)), Ref: netconf.ClaimRef{Claim: claim, Request: request}, Multus: multus}
}

func claimsOf(rcs ...*k8sclient.ResourceClaim) map[string]*Claim {
	out := map[string]*Claim{}
	for _, rc := range rcs {
		out[rc.Metadata.Name] = &Claim{RC: rc}
	}
	return out
}

// TestAssign: networks draw distinct devices in the order of the claim's
// results, named requests before whole claims; each gets the deviceID and
// pciBusID from the slice, or the fallbacks; the record's identity of the
// device is complete.
func TestAssign(t *testing.T) {
	nics := claimOf("p-nics-abc12", "vf:nic-3", "vf:nic-1", "pf:nic-0")
	slices := slicesOf(1, map[string]map[string]string{
		"nic-3": {AttrPCIBusID: "0000:03:00.3"},
		"nic-1": {AttrPCIBusID: "0000:03:00.1", AttrCNIDeviceID: "vf-1"},
		"nic-0": {"ifName": "ens1f0"},
	})
	asked := 0
	kubelet := func() ([]KubeletClaim, error) {
		asked++
		return []KubeletClaim{{Namespace: "ns", Name: "p-nics-abc12", Devices: []KubeletDevice{{Driver: drv, Pool: "node1", Device: "nic-0", CDIDevices: []string{"example.com/nic=pf0"}}}}}, nil
	}

	t.Run("order and keys", func(t *testing.T) {
		// a: the whole claim (Multus form); b: request pf; c: request vf.
		reqs := []Request{req(0, "nics", true), req(1, "nics/pf", false), req(2, "nics/vf", false)}
		devs, err := Assign(testPod, reqs, claimsOf(nics), slices, kubelet)
		if err != nil {
			t.Fatal(err)
		}
		if asked != 1 {
			t.Errorf("the kubelet was asked %d times, want once (for nic-0, which no attribute names)", asked)
		}
		for i, want := range []struct{ device, id, pci, request string }{
			{"nic-1", "vf-1", "0000:03:00.1", "vf"}, // what the named requests left, in results order
			{"nic-0", "pf0", "", "pf"},              // CDI name after "="
			{"nic-3", "0000:03:00.3", "0000:03:00.3", "vf"},
		} {
			d := devs[i]
			if d.Device != want.device || d.DeviceID != want.id || d.PCIBusID != want.pci || d.Request != want.request {
				t.Errorf("%s: got %s (deviceID %q, pci %q, request %s), want %+v", reqs[i].String(), d.Device, d.DeviceID, d.PCIBusID, d.Request, want)
			}
			if d.Keys["deviceID"] != want.id || (want.pci == "") != (d.Keys["pciBusID"] == nil) {
				t.Errorf("%s: keys %v", reqs[i].String(), d.Keys)
			}
			if d.Namespace != "ns" || d.Name != "p-nics-abc12" || d.UID != "uid-p-nics-abc12" || d.PodClaim != "nics" || d.Driver != drv || d.Pool != "node1" {
				t.Errorf("%s: record %+v", reqs[i].String(), d.ClaimDevice)
			}
		}
	})

	t.Run("Multus form: the ResourceClaim's own name", func(t *testing.T) {
		gpu := claimOf("shared-gpu", "gpu:nic-9")
		devs, err := Assign(testPod, []Request{req(0, "shared-gpu", true)}, claimsOf(gpu), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if devs[0].Device != "nic-9" || devs[0].DeviceID != "nic-9" || devs[0].PodClaim != "gpu" {
			t.Errorf("got %+v, want nic-9 of pod claim gpu, deviceID its name (no slice, no CDI)", devs[0])
		}
		if _, err := Assign(testPod, []Request{req(0, "shared-gpu", false)}, claimsOf(gpu), nil, nil); netconf.Code(err) != 7 {
			t.Errorf("the precise form names pod claims only; got %v", err)
		}
	})

	t.Run("no kubelet question when attributes name the devices", func(t *testing.T) {
		asked = 0
		if _, err := Assign(testPod, []Request{req(0, "nics/vf", false), req(1, "nics/vf", false)}, claimsOf(nics), slices, kubelet); err != nil || asked != 0 {
			t.Errorf("error %v, kubelet asked %d times; want none", err, asked)
		}
		failing := func() ([]KubeletClaim, error) { return nil, netconf.TryAgainLater("kubelet down") }
		if _, err := Assign(testPod, []Request{req(0, "nics/pf", false)}, claimsOf(nics), slices, failing); netconf.Code(err) != 11 {
			t.Errorf("a kubelet that cannot answer: %v, want its error", err)
		}
	})

	t.Run("explicit deviceID", func(t *testing.T) {
		a, b := req(0, "nics/vf", false), req(1, "nics/vf", false)
		b.DeviceID = "0000:03:00.3"
		devs, err := Assign(testPod, []Request{a, b}, claimsOf(nics), slices, nil)
		if err != nil {
			t.Fatal(err)
		}
		if devs[0].Device != "nic-1" || devs[1].Device != "nic-3" {
			t.Errorf("devices %s, %s; want nic-1 and the explicit nic-3", devs[0].Device, devs[1].Device)
		}
		b.DeviceID = "nic-1" // by its DRA name
		if devs, err := Assign(testPod, []Request{a, b}, claimsOf(nics), slices, nil); err != nil || devs[1].Device != "nic-1" || devs[0].Device != "nic-3" {
			t.Errorf("by DRA name: %v, %+v", err, devs)
		}
		b.DeviceID = "0000:99:00.0" // some other pod's
		_, err = Assign(testPod, []Request{a, b}, claimsOf(nics), slices, nil)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "0000:99:00.0") || !strings.Contains(err.Error(), "not one of the devices") {
			t.Errorf("a device not the pod's: %v, want code 7 naming it", err)
		}
		b.DeviceID = "nic-0" // the pod's, but not of the request named
		if _, err := Assign(testPod, []Request{a, b}, claimsOf(nics), slices, nil); netconf.Code(err) != 7 {
			t.Errorf("a device of another request: %v, want code 7", err)
		}
	})

	t.Run("too few devices", func(t *testing.T) {
		reqs := []Request{req(0, "nics/pf", false), req(1, "nics/pf", false)}
		_, err := Assign(testPod, reqs, claimsOf(nics), slices, nil)
		if netconf.Code(err) != 7 {
			t.Fatalf("error %v, want code 7", err)
		}
		for _, s := range []string{`request "pf" of claim "nics"`, "2 network(s)", "allocated 1", "ns/neta as net1", "ns/netb as net2", "p-nics-abc12"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	})

	t.Run("adminAccess devices are nobody's", func(t *testing.T) {
		rc := claimOf("p-nics-abc12", "vf:nic-3")
		rc.Status.Allocation.Devices.Results[0].AdminAccess = new(bool)
		*rc.Status.Allocation.Devices.Results[0].AdminAccess = true
		if _, err := Assign(testPod, []Request{req(0, "nics", false)}, claimsOf(rc), slices, nil); netconf.Code(err) != 7 {
			t.Errorf("a device allocated with adminAccess was given: %v", err)
		}
	})

	t.Run("subrequests", func(t *testing.T) {
		rc := claimOf("p-nics-abc12", "vf/fast:nic-3", "vfs:nic-1")
		devs, err := Assign(testPod, []Request{req(0, "nics/vf", false)}, claimsOf(rc), slices, nil)
		if err != nil || devs[0].Device != "nic-3" || devs[0].Request != "vf/fast" {
			t.Errorf("request vf of a prioritized list: %v, %+v; want nic-3 of vf/fast (not vfs)", err, devs)
		}
	})

	t.Run("device keys", func(t *testing.T) {
		r := req(0, "nics/pf", false)
		r.Keys = map[string]string{"device": "ifName", "deviceID": "ifName"}
		devs, err := Assign(testPod, []Request{r}, claimsOf(nics), slices, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs[0].Keys) != 2 || devs[0].Keys["device"] != "ens1f0" || devs[0].DeviceID != "ens1f0" {
			t.Errorf("keys %v, deviceID %q; want only device and deviceID, both ens1f0 (an unqualified name is the driver's)", devs[0].Keys, devs[0].DeviceID)
		}
		r.Keys = map[string]string{"device": "other.example.com/ifName"}
		_, err = Assign(testPod, []Request{r}, claimsOf(nics), slices, nil)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "other.example.com/ifName") || !strings.Contains(err.Error(), drv+"/ifName") {
			t.Errorf("a missing attribute: %v, want code 7 naming it and the ones the device has", err)
		}
	})
}

// TestResolve: Multus's resourceName is first a claim's name in the pod,
// else a ResourceClaim's; a name that means two claims, an unknown one and
// a claim with no ResourceClaim are code-7 errors.
func TestResolve(t *testing.T) {
	pod := &Pod{Namespace: "ns", Name: "p", Claims: []k8sclient.PodResourceClaim{
		{Name: "a", ClaimName: "b"}, {Name: "b", ClaimName: "c"}, {Name: "pending"},
	}}
	for _, tc := range []struct {
		ref       string
		multus    bool
		podClaim  string
		claimName string
		err       string
	}{
		{ref: "a", multus: true, podClaim: "a", claimName: "b"},
		{ref: "c", multus: true, podClaim: "b", claimName: "c"},
		{ref: "b", multus: true, err: "names claim \"b\" of the pod and also ResourceClaim b"},
		{ref: "b", podClaim: "b", claimName: "c"},
		{ref: "c", err: "is not a claim of pod ns/p (its claims: a (ResourceClaim b), b (ResourceClaim c), pending)"},
		{ref: "nic", multus: true, err: "a device plugin's resource has a domain"},
		{ref: "pending", err: "claim \"pending\" of pod ns/p has no ResourceClaim"},
	} {
		r := req(0, tc.ref, tc.multus)
		podClaim, name, err := pod.Resolve(&r)
		if tc.err != "" {
			if netconf.Code(err) != 7 || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s (multus %v): %v, want code 7 saying %q", tc.ref, tc.multus, err, tc.err)
			}
			continue
		}
		if err != nil || podClaim != tc.podClaim || name != tc.claimName {
			t.Errorf("%s (multus %v): %s, %s, %v; want %s, %s", tc.ref, tc.multus, podClaim, name, err, tc.podClaim, tc.claimName)
		}
	}
}

// TestClaimCheck: a claim that is not allocated, or not reserved for this
// pod, gives nothing.
func TestClaimCheck(t *testing.T) {
	ok := claimOf("x", "r:d")
	if err := (&Claim{RC: ok}).Check(testPod); err != nil {
		t.Errorf("allocated and reserved: %v", err)
	}
	notMine := claimOf("x", "r:d")
	notMine.Status.ReservedFor[0].UID = "another-pod-of-that-name"
	unallocated := claimOf("x")
	unallocated.Status.Allocation = nil
	for name, rc := range map[string]*k8sclient.ResourceClaim{"reserved for another": notMine, "unallocated": unallocated} {
		if err := (&Claim{RC: rc}).Check(testPod); netconf.Code(err) != 7 {
			t.Errorf("%s: %v, want code 7", name, err)
		}
	}
}

// TestSlicesNewestGeneration: of a pool published in two generations, the
// older one's devices are not used.
func TestSlicesNewestGeneration(t *testing.T) {
	old, cur := k8sclient.ResourceSlice{}, k8sclient.ResourceSlice{}
	for _, s := range []*k8sclient.ResourceSlice{&old, &cur} {
		s.Spec.Driver, s.Spec.Pool.Name = drv, "node1"
	}
	old.Spec.Pool.Generation, cur.Spec.Pool.Generation = 1, 2
	old.Spec.Devices = []k8sclient.SliceDevice{{Name: "gone"}, {Name: "nic-0", Attributes: map[string]k8sclient.DeviceAttribute{"ifName": {String: str("old")}}}}
	cur.Spec.Devices = []k8sclient.SliceDevice{{Name: "nic-0", Attributes: map[string]k8sclient.DeviceAttribute{"ifName": {String: str("new")}}}}
	for _, order := range [][]k8sclient.ResourceSlice{{old, cur}, {cur, old}} {
		s := NewSlices(order)
		if _, ok := s.Attributes(drv, "node1", "gone"); ok {
			t.Error("a device of the older generation is still there")
		}
		if a, _ := s.Attributes(drv, "node1", "nic-0"); a[drv+"/ifName"].Value() != "new" {
			t.Errorf("nic-0's attributes %v, want the newer generation's", a)
		}
	}
}
