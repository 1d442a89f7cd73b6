package e2e

// DRA networks against a real API server (issue 28): ResourceClaims,
// ResourceSlices and pods are real objects, allocated and reserved by the
// test as the scheduler would (this tier runs no scheduler); the kubelet's
// PodResources API is podresourcestest over its real gRPC API; delegates are
// a real macvlan with the recorder behind it. The claim's status.devices is
// written and read back through the real API server, server-side apply,
// field managers and all. The real node's test (a DRA driver, the
// scheduler, host-device) is TestNodeDRA.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/manifold-cni/manifold/devinfo"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

const (
	draDriver   = "nic.e2e.manifold.test"
	draNodeName = "e2e-node" // env.pod's node
	sriovPool   = "e2e-sriov"
	// hostDeviceNet is a resourceName with a domain, as the SR-IOV DRA
	// driver's users name it.
	hostDeviceNet = "openshift.io/host-device-net"
)

// draNAD creates NAD name: a macvlan on the env's parent, then a recorder
// that declares deviceID and CNIDeviceInfoFile, with the given annotations.
func (e *deviceEnv) draNAD(name string, s subnet, annotations map[string]string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Join(e.recordDir, name), 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.annotatedNAD(e.ns, name, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[
		{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"host-local","subnet":%q,"dataDir":%q}},
		{"type":"recorder","recordDir":%q,"capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}]}`,
		name, e.parent, s, e.leaseDir, filepath.Join(e.recordDir, name)), annotations)
}

// draSlice publishes node draNodeName's pool of draDriver: nic-<i> for each
// given PCI address ("" for a device with no attributes).
func (e *deviceEnv) draSlice(pci map[string]string) {
	e.t.Helper()
	node := draNodeName
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-nics-"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: draDriver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: draNodeName, Generation: 1, ResourceSliceCount: 1},
	}}
	for _, dev := range sorted(keys(pci)) {
		d := resourcev1.Device{Name: dev, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		if addr := pci[dev]; addr != "" {
			d.Attributes["resource.kubernetes.io/pciBusID"] = resourcev1.DeviceAttribute{StringValue: &addr}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	created, err := e.k8s.ResourceV1().ResourceSlices().Create(e.ctx(), s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ResourceSlice: %v", err)
	}
	e.t.Cleanup(func() { _ = e.k8s.ResourceV1().ResourceSlices().Delete(e.ctx(), created.Name, metav1.DeleteOptions{}) })
}

// draAttrSlice publishes pool sriovPool of draDriver on draNodeName as the
// SR-IOV DRA driver does in its MULTUS mode: each device (name: resourceName,
// deviceID) with the attributes k8s.cni.cncf.io/resourceName and
// k8s.cni.cncf.io/deviceID.
func (e *deviceEnv) draAttrSlice(devs map[string][2]string) {
	e.t.Helper()
	node := draNodeName
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-sriov-"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: draDriver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: sriovPool, Generation: 1, ResourceSliceCount: 1},
	}}
	for _, dev := range sorted(keys(devs)) {
		res, id := devs[dev][0], devs[dev][1]
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: dev, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"k8s.cni.cncf.io/resourceName": {StringValue: &res}, "k8s.cni.cncf.io/deviceID": {StringValue: &id},
		}})
	}
	created, err := e.k8s.ResourceV1().ResourceSlices().Create(e.ctx(), s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ResourceSlice: %v", err)
	}
	e.t.Cleanup(func() { _ = e.k8s.ResourceV1().ResourceSlices().Delete(e.ctx(), created.Name, metav1.DeleteOptions{}) })
}

// draClaim creates ResourceClaim name with one request per "request:device"
// (or "request:pool/device"; the pool is draNodeName unless named) and
// allocates it on draNodeName, each request its device, as the scheduler
// would; reserve reserves it for a pod.
func (e *deviceEnv) draClaim(name string, results ...string) *resourcev1.ResourceClaim {
	e.t.Helper()
	rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}
	var alloc []resourcev1.DeviceRequestAllocationResult
	for _, r := range results {
		req, dev, _ := strings.Cut(r, ":")
		pool := draNodeName
		if p, d, ok := strings.Cut(dev, "/"); ok {
			pool, dev = p, d
		}
		if !slices.ContainsFunc(rc.Spec.Devices.Requests, func(d resourcev1.DeviceRequest) bool { return d.Name == req }) {
			rc.Spec.Devices.Requests = append(rc.Spec.Devices.Requests, resourcev1.DeviceRequest{Name: req,
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}})
		}
		alloc = append(alloc, resourcev1.DeviceRequestAllocationResult{Request: req, Driver: draDriver, Pool: pool, Device: dev})
	}
	created, err := e.k8s.ResourceV1().ResourceClaims(e.ns).Create(e.ctx(), rc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ResourceClaim %s: %v", name, err)
	}
	created.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: alloc},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{draNodeName}}}}}}}
	if created, err = e.k8s.ResourceV1().ResourceClaims(e.ns).UpdateStatus(e.ctx(), created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("allocate ResourceClaim %s: %v", name, err)
	}
	return created
}

// draPod creates a pod with the given claims (pod claim name: ResourceClaim
// name; a name starting with "tmpl:" is a claim made from a template, whose
// ResourceClaim the pod's status names, as the controller writes it), and
// reserves each claim for it; edit, if given, changes the pod before it is
// created.
func (e *deviceEnv) draPod(annotations map[string]string, claims map[string]string, edit ...func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("pod-"), Namespace: e.ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:   draNodeName,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	var statuses []corev1.PodResourceClaimStatus
	for _, podClaim := range sorted(keys(claims)) {
		name, tmpl := strings.CutPrefix(claims[podClaim], "tmpl:")
		c := corev1.PodResourceClaim{Name: podClaim}
		if tmpl {
			t := "nics-template"
			c.ResourceClaimTemplateName = &t
			statuses = append(statuses, corev1.PodResourceClaimStatus{Name: podClaim, ResourceClaimName: &name})
		} else {
			c.ResourceClaimName = &name
		}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, c)
	}
	for _, f := range edit {
		f(p)
	}
	p, err := e.k8s.CoreV1().Pods(e.ns).Create(e.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod with claims: %v", err)
	}
	if len(statuses) > 0 {
		p.Status.ResourceClaimStatuses = statuses
		if p, err = e.k8s.CoreV1().Pods(e.ns).UpdateStatus(e.ctx(), p, metav1.UpdateOptions{}); err != nil {
			e.t.Fatalf("write the pod's claim statuses: %v", err)
		}
	}
	for _, v := range claims {
		name, _ := strings.CutPrefix(v, "tmpl:")
		e.reserve(name, p)
	}
	return p
}

// reserve reserves ResourceClaim name for pod p, as the scheduler would.
func (e *deviceEnv) reserve(name string, p *corev1.Pod) {
	e.t.Helper()
	rc, err := e.k8s.ResourceV1().ResourceClaims(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	rc.Status.ReservedFor = append(rc.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	if _, err := e.k8s.ResourceV1().ResourceClaims(e.ns).UpdateStatus(e.ctx(), rc, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("reserve ResourceClaim %s: %v", name, err)
	}
}

// driverStatus writes status.devices entries of claim as its driver would:
// a server-side apply as field manager "nic-driver".
func (e *deviceEnv) driverStatus(claim string, devices ...map[string]any) {
	e.t.Helper()
	for _, d := range devices {
		d["driver"], d["pool"] = draDriver, draNodeName
	}
	body, err := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": claim, "namespace": e.ns}, "status": map[string]any{"devices": devices}})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.k8s.ResourceV1().ResourceClaims(e.ns).Patch(e.ctx(), claim, k8stypes.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "nic-driver"}, "status"); err != nil {
		e.t.Fatalf("write the driver's status of %s: %v", claim, err)
	}
}

// claimDevices reads claim's status.devices by device name.
func (e *deviceEnv) claimDevices(claim string) map[string]resourcev1.AllocatedDeviceStatus {
	e.t.Helper()
	rc, err := e.k8s.ResourceV1().ResourceClaims(e.ns).Get(e.ctx(), claim, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]resourcev1.AllocatedDeviceStatus{}
	for _, d := range rc.Status.Devices {
		out[d.Device] = d
	}
	return out
}

// waitClaimDevices waits, within reportWait, until ok holds of claim's
// status.devices (the daemon writes it after it answers), and returns them;
// at the deadline it fails the test, and returns the last it read.
func (e *deviceEnv) waitClaimDevices(claim string, ok func(map[string]resourcev1.AllocatedDeviceStatus) bool) map[string]resourcev1.AllocatedDeviceStatus {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		got := e.claimDevices(claim)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			e.t.Errorf("claim %s's status.devices after %s: %+v, not what the test waits for", claim, reportWait, got)
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDRA: networks on DRA devices, in thin and thick mode. A pod with a
// claim made from a template with two requests, and a claim of its own
// named by its ResourceClaim's name as Multus v4.3.0 compares it, gets one
// device per network: by request with the precise annotation, and through
// the kubelet's CDI name for a device no attribute names. Each plugin gets
// its deviceID and pciBusID; network-status shows the PCI devices as
// device-info; the claims' status.devices show each attachment's
// networkData and a Ready condition beside what the driver wrote, and the
// driver's networkData is left to it. DEL, with the kubelet gone, takes
// back what manifold wrote and nothing of the driver's. NADs that name
// devices by their k8s.cni.cncf.io/resourceName attribute, with a domain and
// without, get them and their k8s.cni.cncf.io/deviceID, after the device
// plugin's device of the same name, and the driver's Device Info file; an
// extended resource that DRA serves is found through the pod's
// status.extendedResourceClaimStatus. Too few devices is code 7 and a
// Warning, and nothing is left.
func TestDRA(t *testing.T) {
	top := newDeviceEnv(t)
	top.draSlice(map[string]string{"nic-0": "0000:03:00.0", "nic-1": "0000:03:00.1", "nic-9": ""})
	sa, sb, sc, sd := nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet()
	top.draNAD("dra-vf", sa, map[string]string{netconf.AnnotResourceClaim: "nics/vf"})
	top.draNAD("dra-pf", sb, map[string]string{netconf.AnnotResourceClaim: "nics/pf"})
	top.draNAD("dra-any", sd, map[string]string{"k8s.v1.cni.cncf.io/resourceName": "nics"})
	top.draAttrSlice(map[string][2]string{"vf-0": {hostDeviceNet, "0000:08:00.0"}, "vf-1": {hostDeviceNet, "0000:08:00.1"}, "vf-2": {"sriov_nic_2", "0000:08:02.2"}})
	se, sf := nextSubnet(), nextSubnet()
	top.draNAD("dra-hostdev", se, map[string]string{"k8s.v1.cni.cncf.io/resourceName": hostDeviceNet})
	top.draNAD("dra-nic2", sf, map[string]string{"k8s.v1.cni.cncf.io/resourceName": "sriov_nic_2"})
	top.draNAD("dra-ext", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": "example.com/nic"})
	// The driver's Device Info file for vf-1, as it writes it for Multus.
	driverInfo := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:08:00.1","pf-pci-address":"0000:08:00.0"}}`
	if path, err := (devinfo.Dir{Base: top.infoDir}).DevicePluginPath(hostDeviceNet, "0000:08:00.1"); err != nil {
		t.Fatal(err)
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(path, []byte(driverInfo), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := func(t *testing.T) *deviceEnv {
		return &deviceEnv{env: top.sub(t), checkpoint: top.checkpoint, infoDir: top.infoDir, recordDir: top.recordDir}
	}
	for i, m := range deviceModes {
		t.Run(m.name+"/two claims, a claim with two requests", func(t *testing.T) {
			e := sub(t)
			nics, own := fmt.Sprintf("pod-nics-%d", i), fmt.Sprintf("own-nic-%d", i)
			e.draNAD("dra-own-"+m.name, sc, map[string]string{"k8s.v1.cni.cncf.io/resourceName": own})
			e.draClaim(nics, "vf:nic-1", "pf:nic-0")
			e.draClaim(own, "nic:nic-9")
			pod := e.draPod(map[string]string{annotNetworks: "dra-vf, dra-pf, dra-own-" + m.name}, map[string]string{"nics": "tmpl:" + nics, "own": own})
			// The driver describes nic-0's network itself, and keeps data on nic-1.
			e.driverStatus(nics, map[string]any{"device": "nic-0", "networkData": map[string]any{"interfaceName": "set-by-driver"}},
				map[string]any{"device": "nic-1", "data": map[string]any{"firmware": "1.2"}})
			kubelet := podresourcestest.Start(t, podresourcestest.Pod{Namespace: e.ns, Name: pod.Name, Containers: []podresourcestest.Container{{Name: "c",
				Claims: []podresourcestest.Claim{{Namespace: e.ns, Name: own, Devices: []podresourcestest.ClaimDevice{{Driver: draDriver, Pool: draNodeName, Device: "nic-9", CDI: []string{"e2e.manifold.test/nic=vf9"}}}}}}}})
			conf, rt := m.setup(t, e, kubelet.Socket)
			sbx := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			for _, c := range []struct{ nad, ifname, deviceID, pci string }{
				{"dra-vf", "net1", "0000:03:00.1", "0000:03:00.1"},
				{"dra-pf", "net2", "0000:03:00.0", "0000:03:00.0"},
				{"dra-own-" + m.name, "net3", "vf9", ""},
			} {
				in := e.recorded(c.nad, c.ifname)
				rc, _ := in["runtimeConfig"].(map[string]any)
				if in["deviceID"] != c.deviceID || rc["deviceID"] != c.deviceID {
					t.Errorf("%s: deviceID %v, runtimeConfig %v; want %s", c.nad, in["deviceID"], rc, c.deviceID)
				}
				if (c.pci == "" && in["pciBusID"] != nil) || (c.pci != "" && in["pciBusID"] != c.pci) {
					t.Errorf("%s: pciBusID %v, want %q", c.nad, in["pciBusID"], c.pci)
				}
			}
			st := e.waitForStatus(pod)
			info := map[string]string{}
			mac := map[string]string{}
			for _, s := range st {
				info[s.Interface], mac[s.Interface] = string(s.DeviceInfo), s.MAC
			}
			for ifname, addr := range map[string]string{"net1": "0000:03:00.1", "net2": "0000:03:00.0"} {
				if want := `{"pci":{"pci-address":"` + addr + `"},"type":"pci","version":"1.1.0"}`; info[ifname] != want {
					t.Errorf("network-status device-info of %s = %s, want %s", ifname, info[ifname], want)
				}
			}
			if info["net3"] != "" {
				t.Errorf("device-info of net3, a device with no PCI address: %s", info["net3"])
			}

			devs := e.waitClaimDevices(nics, func(d map[string]resourcev1.AllocatedDeviceStatus) bool {
				return len(d["nic-0"].Conditions) > 0 && d["nic-1"].NetworkData != nil
			})
			if nd := devs["nic-1"].NetworkData; nd == nil || nd.InterfaceName != "net1" || nd.HardwareAddress != mac["net1"] || len(nd.IPs) != 1 || !strings.HasPrefix(nd.IPs[0], strings.TrimSuffix(sa.String(), "0/24")) || !strings.HasSuffix(nd.IPs[0], "/24") {
				t.Errorf("nic-1's networkData %+v, want net1, its MAC %s and its address in %s", nd, mac["net1"], sa)
			}
			if d := devs["nic-1"]; d.Data == nil || !strings.Contains(string(d.Data.Raw), "firmware") || len(d.Conditions) != 1 || d.Conditions[0].Type != "Ready" || d.Conditions[0].Status != metav1.ConditionTrue {
				t.Errorf("nic-1's entry %+v: want the driver's data kept, and a Ready condition", d)
			}
			if d := devs["nic-0"]; d.NetworkData == nil || d.NetworkData.InterfaceName != "set-by-driver" || len(d.Conditions) != 1 || !strings.Contains(d.Conditions[0].Message, "net2") {
				t.Errorf("nic-0's entry %+v: want the driver's networkData kept, and manifold's Ready", d)
			}
			own9 := e.waitClaimDevices(own, func(d map[string]resourcev1.AllocatedDeviceStatus) bool { return d["nic-9"].NetworkData != nil })
			if nd := own9["nic-9"].NetworkData; nd == nil || nd.InterfaceName != "net3" {
				t.Errorf("%s's nic-9 networkData %+v, want net3", own, nd)
			}

			kubelet.Stop() // DEL asks the kubelet nothing
			if err := rt.Del(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			e.checkNothingLeft(sbx)
			devs = e.claimDevices(nics)
			if d := devs["nic-1"]; d.NetworkData != nil || len(d.Conditions) != 0 || d.Data == nil {
				t.Errorf("nic-1 after DEL %+v: want only the driver's data", d)
			}
			if d := devs["nic-0"]; d.NetworkData == nil || d.NetworkData.InterfaceName != "set-by-driver" || len(d.Conditions) != 0 {
				t.Errorf("nic-0 after DEL %+v: want the driver's networkData alone", d)
			}
			if got := e.claimDevices(own); len(got) != 0 {
				t.Errorf("%s after DEL: %+v, want no entries (manifold wrote them all)", own, got)
			}
			if got := e.infoFiles(); len(got) != 0 {
				t.Errorf("Device Info files left after DEL: %v", got)
			}
		})

		t.Run(m.name+"/by the devices' resourceName, beside a device plugin's", func(t *testing.T) {
			e := sub(t)
			sriov, other := fmt.Sprintf("pod-sriov-%d", i), fmt.Sprintf("other-sriov-%d", i)
			e.draClaim(sriov, "vf:"+sriovPool+"/vf-1", "vf:"+sriovPool+"/vf-0")
			e.draClaim(other, "vf:"+sriovPool+"/vf-2")
			pod := e.draPod(map[string]string{annotNetworks: "dra-hostdev, dra-hostdev, dra-nic2, dra-hostdev"}, map[string]string{"sriov": "tmpl:" + sriov, "other": other})
			// The kubelet gave the pod one device of the resource from a device plugin too.
			kubelet := podresourcestest.Start(t, kubeletPod(pod, podresourcestest.Device{Resource: hostDeviceNet, ID: "0000:05:00.1"}))
			conf, rt := m.setup(t, e, kubelet.Socket)
			sbx := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			for _, c := range []struct{ nad, ifname, deviceID string }{
				{"dra-hostdev", "net1", "0000:05:00.1"}, // the device plugin's first
				{"dra-hostdev", "net2", "0000:08:00.0"}, // then DRA's, by deviceID
				{"dra-nic2", "net3", "0000:08:02.2"},    // no domain, no claim of that name
				{"dra-hostdev", "net4", "0000:08:00.1"},
			} {
				in := e.recorded(c.nad, c.ifname)
				rc, _ := in["runtimeConfig"].(map[string]any)
				if in["deviceID"] != c.deviceID || rc["deviceID"] != c.deviceID {
					t.Errorf("%s as %s: deviceID %v, runtimeConfig %v; want %s", c.nad, c.ifname, in["deviceID"], rc, c.deviceID)
				}
			}
			st := e.waitForStatus(pod)
			info := map[string]string{}
			for _, s := range st {
				info[s.Interface] = string(s.DeviceInfo)
			}
			if info["net4"] != driverInfo {
				t.Errorf("device-info of net4 = %s, want the driver's file %s", info["net4"], driverInfo)
			}
			devs := e.waitClaimDevices(sriov, func(d map[string]resourcev1.AllocatedDeviceStatus) bool {
				return d["vf-0"].NetworkData != nil && d["vf-1"].NetworkData != nil
			})
			if devs["vf-0"].NetworkData == nil || devs["vf-0"].NetworkData.InterfaceName != "net2" || devs["vf-1"].NetworkData == nil || devs["vf-1"].NetworkData.InterfaceName != "net4" {
				t.Errorf("%s's status.devices %+v, want vf-0 as net2 and vf-1 as net4", sriov, devs)
			}
			kubelet.Stop()
			if err := rt.Del(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			e.checkNothingLeft(sbx)
			if got := e.claimDevices(sriov); len(got) != 0 {
				t.Errorf("%s after DEL: %+v, want no entries", sriov, got)
			}
			if got := e.infoFiles(); len(got) != 0 {
				t.Errorf("Device Info files left after DEL: %v", got)
			}
		})

		t.Run(m.name+"/an extended resource that DRA serves", func(t *testing.T) {
			e := sub(t)
			// The scheduler's claim for the pod's example.com/nic: nic-0,
			// which has no resourceName attribute; the mapping says it all.
			ext := fmt.Sprintf("pod-extended-resources-%d", i)
			e.draClaim(ext, "container-0-request-0:nic-0")
			pod := e.draPod(map[string]string{annotNetworks: "dra-ext"}, nil, func(p *corev1.Pod) {
				one := corev1.ResourceList{"example.com/nic": resource.MustParse("1")}
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: one, Limits: one}
			})
			pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: ext,
				RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "pause", ResourceName: "example.com/nic", RequestName: "container-0-request-0"}}}
			pod, err := e.k8s.CoreV1().Pods(e.ns).UpdateStatus(e.ctx(), pod, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("write the pod's extendedResourceClaimStatus: %v", err)
			}
			e.reserve(ext, pod)
			kubelet := podresourcestest.Start(t, kubeletPod(pod))
			conf, rt := m.setup(t, e, kubelet.Socket)
			sbx := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			in := e.recorded("dra-ext", "net1")
			if rc, _ := in["runtimeConfig"].(map[string]any); in["deviceID"] != "0000:03:00.0" || rc["deviceID"] != "0000:03:00.0" {
				t.Errorf("deviceID %v, runtimeConfig %v; want nic-0's 0000:03:00.0", in["deviceID"], rc)
			}
			devs := e.waitClaimDevices(ext, func(d map[string]resourcev1.AllocatedDeviceStatus) bool { return d["nic-0"].NetworkData != nil })
			if nd := devs["nic-0"].NetworkData; nd == nil || nd.InterfaceName != "net1" {
				t.Errorf("%s's nic-0 networkData %+v, want net1", ext, nd)
			}
			if err := rt.Del(e.ctx(), conf, sbx.Pod); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			e.checkNothingLeft(sbx)
		})

		t.Run(m.name+"/too few devices", func(t *testing.T) {
			e := sub(t)
			nics := fmt.Sprintf("few-nics-%d", i)
			e.draClaim(nics, "vf:nic-1", "pf:nic-0")
			pod := e.draPod(map[string]string{annotNetworks: "dra-vf, dra-any, dra-vf"}, map[string]string{"nics": "tmpl:" + nics})
			conf, rt := m.setup(t, e, filepath.Join(t.TempDir(), "absent.sock"))
			sbx := e.sandboxFor(pod)
			_, err := rt.Add(e.ctx(), conf, sbx.Pod)
			wantCode(t, err, 7, `request "vf" of claim "nics"`, "2 network(s)", "allocated 1", e.ns+"/dra-vf as net3")
			e.checkRefused(sbx, `request "vf" of claim "nics"`)
			if got := e.claimDevices(nics); len(got) != 0 {
				t.Errorf("status.devices after a refused ADD: %+v", got)
			}
		})
	}
}
