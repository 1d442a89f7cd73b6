package e2e

// DRA on the real node (issue 28): a DRA driver of the tests (dradriver, on
// k8s.io/dynamic-resource-allocation/kubeletplugin) registers with the real
// kubelet and publishes stand-in NICs (veth ends on the host); pods that
// name no node ask for them through ResourceClaimTemplates (and a
// ResourceClaim of their own), kube-controller-manager makes the claims,
// kube-scheduler allocates the NICs and binds the pods, the kubelet has the
// driver prepare them; manifold hands each network its NIC and the
// reference host-device plugin moves that very interface into the pod.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/e2e/dradriver"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources"
)

func TestNodeDRAThin(t *testing.T)   { nodeDRACases(t, false) }
func TestNodeDRADaemon(t *testing.T) { nodeDRACases(t, true) }

// draNode is a kubeNode with the test DRA driver and its DeviceClass.
type draNode struct {
	*kubeNode
	driver *dradriver.Driver
	class  string
	// macs are the NICs' MACs on the host, by interface, before any pod.
	macs map[string]string
}

func nodeDRACases(t *testing.T, daemon bool) {
	n := newKubeNode(t, containerdKind, daemon)
	name := "nic.dra.manifold.test"
	ctx, cancel := context.WithTimeout(context.Background(), nodeWait)
	defer cancel()
	dataDir, err := os.MkdirTemp("", "dra") // short: it holds a unix socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	d, err := dradriver.Start(context.Background(), dradriver.Options{Driver: name, NodeName: n.name, Client: n.k8s,
		KubeletRootDir: n.kubelet.RootDir(), DataDir: dataDir, NICs: 3, Prefix: testenv.UniqueName("drn")[:9],
		ResourceNames: []string{hostDeviceNet, hostDeviceNet, "sriov_nic_2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if errs := d.Errors(); t.Failed() && len(errs) > 0 {
			t.Logf("DRA driver errors: %v", errs)
		}
		d.Stop()
	})
	dn := &draNode{kubeNode: n, driver: d, class: name, macs: map[string]string{}}
	for _, nic := range d.NICs {
		l, err := netlink.LinkByName(nic.IfName)
		if err != nil {
			t.Fatal(err)
		}
		dn.macs[nic.IfName] = l.Attrs().HardwareAddr.String()
	}
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", name)}}}}}
	if _, err := n.k8s.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.k8s.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The pool is published once the kubelet has registered the driver.
	for {
		list, err := n.k8s.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + name})
		if err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the driver's ResourceSlice was not published: %v, %v; driver errors: %v", list, err, d.Errors())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range []struct {
		name string
		run  func(*draNode)
	}{
		{"one NIC", draOneNIC},
		{"two claims, one with two requests", draTwoClaims},
		{"by the devices' resourceName", draByResourceName},
		{"an extended resource", draExtendedResource},
		{"too few devices", draTooFew},
	} {
		if !t.Run(c.name, func(t *testing.T) { c.run(&draNode{kubeNode: n.sub(t), driver: d, class: name, macs: dn.macs}) }) {
			return
		}
	}
}

// hostDeviceNAD is NAD name of the reference host-device plugin, taking the
// interface its DRA device names (the driver's ifName attribute, handed as
// host-device's "device"), with an address in s.
func (n *draNode) hostDeviceNAD(name string, s subnet, annotations map[string]string) {
	n.t.Helper()
	all := map[string]string{netconf.AnnotDeviceKeys: `{"device":"` + dradriver.AttrIfName + `"}`}
	for k, v := range annotations {
		all[k] = v
	}
	n.annotatedNAD(n.ns, name, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"host-device",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, name, s, n.leaseDir), all)
}

// claimSpec is one claim of a pod: requests "r0", "r1", ... of one NIC
// each; made from a ResourceClaimTemplate, or else a ResourceClaim of the
// test's own that the pod names (its name is then claimSpec.name).
type claimSpec struct {
	requests int
	template bool
	name     string
	// resourceName, when set, is the k8s.cni.cncf.io/resourceName each
	// request's NIC must have (a CEL selector, as the SR-IOV DRA driver's
	// examples write it).
	resourceName string
}

// schedulePod makes a pod that names no node, whose only container names
// every claim (so that the kubelet's PodResources lists them), with the
// claims given (pod claim name -> claimSpec). The controllers make the
// claims of templates, the scheduler allocates NICs and binds the pod.
func (n *draNode) schedulePod(annotations map[string]string, claims map[string]claimSpec) *corev1.Pod {
	n.t.Helper()
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("dra-"), Namespace: n.ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			DNSPolicy: corev1.DNSDefault, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: crinode.ImageRef, ImagePullPolicy: corev1.PullNever, Command: []string{crinode.Pause}}},
		},
	}
	for _, podClaim := range sorted(keys(claims)) {
		c := claims[podClaim]
		var spec resourcev1.ResourceClaimSpec
		for j := range c.requests {
			exactly := &resourcev1.ExactDeviceRequest{DeviceClassName: n.class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
			if c.resourceName != "" {
				exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes["k8s.cni.cncf.io"].resourceName == %q`, c.resourceName)}}}
			}
			spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{Name: fmt.Sprintf("r%d", j), Exactly: exactly})
		}
		ref := corev1.PodResourceClaim{Name: podClaim}
		if c.template {
			name := testenv.UniqueName(podClaim + "-")
			tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}
			if _, err := n.k8s.ResourceV1().ResourceClaimTemplates(n.ns).Create(n.ctx(), tmpl, metav1.CreateOptions{}); err != nil {
				n.t.Fatal(err)
			}
			ref.ResourceClaimTemplateName = &name
		} else {
			rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: n.ns}, Spec: spec}
			if _, err := n.k8s.ResourceV1().ResourceClaims(n.ns).Create(n.ctx(), rc, metav1.CreateOptions{}); err != nil {
				n.t.Fatal(err)
			}
			name := c.name
			ref.ResourceClaimName = &name
		}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, ref)
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: podClaim})
	}
	p, err := n.k8s.CoreV1().Pods(n.ns).Create(n.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatalf("create pod: %v", err)
	}
	return p
}

// podClaims reads the pod's ResourceClaims, by their names in the pod,
// once each is allocated.
func (n *draNode) podClaims(p *corev1.Pod) map[string]*resourcev1.ResourceClaim {
	n.t.Helper()
	deadline := time.Now().Add(nodeWait)
	for {
		got := n.getPod(p)
		out := map[string]*resourcev1.ResourceClaim{}
		for _, c := range got.Spec.ResourceClaims {
			name := c.ResourceClaimName
			for _, st := range got.Status.ResourceClaimStatuses {
				if st.Name == c.Name {
					name = st.ResourceClaimName
				}
			}
			if name == nil {
				break
			}
			rc, err := n.k8s.ResourceV1().ResourceClaims(n.ns).Get(n.ctx(), *name, metav1.GetOptions{})
			if err != nil || rc.Status.Allocation == nil {
				break
			}
			out[c.Name] = rc
		}
		if len(out) == len(got.Spec.ResourceClaims) {
			return out
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("pod %s's claims are not all allocated after %s (%d of %d); events: %v", p.Name, nodeWait, len(out), len(got.Spec.ResourceClaims), eventMessages(n.events(p)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nicOf is the NIC (its index) allocated to request of rc.
func (n *draNode) nicOf(rc *resourcev1.ResourceClaim, request string) int {
	n.t.Helper()
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Request != request {
			continue
		}
		for i, nic := range n.driver.NICs {
			if nic.Device == r.Device {
				return i
			}
		}
	}
	n.t.Fatalf("no NIC of the driver allocated to request %s of %s: %+v", request, rc.Name, rc.Status.Allocation)
	return -1
}

// podLinks are the links in a running pod's netns: name -> MAC.
func (n *draNode) podLinks(p *corev1.Pod) map[string]string {
	n.t.Helper()
	netns := n.sandboxNetNS(n.sandboxOf(p))
	defer netns.Close()
	out := map[string]string{}
	for name, l := range links(n.t, netns) {
		out[name] = l.mac
	}
	return out
}

// checkAttached checks that each NIC (by index) is in the pod as the
// interface given, the very one (its MAC), gone from the host; that
// network-status shows it with its PCI address as device-info; and that its
// claim's status.devices shows the interface, the pod's address and the MAC.
func (n *draNode) checkAttached(p *corev1.Pod, rcs map[string]*resourcev1.ResourceClaim, want map[string]int) {
	t := n.t
	t.Helper()
	inPod := n.podLinks(p)
	st := n.waitNetworkStatus(p, 2+len(want))
	for ifname, i := range want {
		nic := n.driver.NICs[i]
		if inPod[ifname] != n.macs[nic.IfName] {
			t.Errorf("%s in the pod has MAC %q, want NIC %s's %s (pod links %v)", ifname, inPod[ifname], nic.IfName, n.macs[nic.IfName], inPod)
		}
		if testenv.HostLinkExists(nic.IfName) {
			t.Errorf("NIC %s is still on the host while the pod has it", nic.IfName)
		}
		s := st[ifname]
		if want := `{"pci":{"pci-address":"` + nic.PCIBusID + `"},"type":"pci","version":"1.1.0"}`; string(s.DeviceInfo) != want {
			t.Errorf("network-status device-info of %s = %s, want %s", ifname, s.DeviceInfo, want)
		}
		found := false
		for _, rc := range rcs {
			got := n.waitClaimEntry(rc, nic.Device)
			if got == nil {
				continue
			}
			found = true
			nd := got.NetworkData
			if nd == nil || nd.InterfaceName != ifname || nd.HardwareAddress != n.macs[nic.IfName] || len(s.IPs) == 0 || !slices.Contains(nd.IPs, s.IPs[0]+"/24") {
				t.Errorf("status.devices of %s/%s: networkData %+v, want %s, MAC %s and %v/24", rc.Name, nic.Device, nd, ifname, n.macs[nic.IfName], s.IPs)
			}
			if len(got.Conditions) != 1 || got.Conditions[0].Type != "Ready" || got.Conditions[0].Status != metav1.ConditionTrue {
				t.Errorf("status.devices of %s/%s: conditions %+v, want Ready", rc.Name, nic.Device, got.Conditions)
			}
		}
		if !found {
			t.Errorf("no claim's status.devices has NIC %s", nic.Device)
		}
	}
}

// waitNetworkStatus waits for the pod's network-status with n entries and
// returns them by interface.
func (n *draNode) waitNetworkStatus(p *corev1.Pod, entries int) map[string]networkStatus {
	n.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		list, ok := n.status(p)
		if ok && len(list) == entries {
			out := map[string]networkStatus{}
			for _, s := range list {
				out[s.Interface] = s
			}
			return out
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("network-status of %s: %v (%v), want %d entries", p.Name, list, ok, entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitClaimEntry waits (the daemon writes after it answers) for rc's
// status.devices entry of device, if rc was allocated that device; nil
// otherwise.
func (n *draNode) waitClaimEntry(rc *resourcev1.ResourceClaim, device string) *resourcev1.AllocatedDeviceStatus {
	if !slices.ContainsFunc(rc.Status.Allocation.Devices.Results, func(r resourcev1.DeviceRequestAllocationResult) bool { return r.Device == device }) {
		return nil
	}
	deadline := time.Now().Add(reportWait)
	for {
		got, err := n.k8s.ResourceV1().ResourceClaims(rc.Namespace).Get(n.ctx(), rc.Name, metav1.GetOptions{})
		if err != nil {
			n.t.Fatal(err)
		}
		for i := range got.Status.Devices {
			if d := &got.Status.Devices[i]; d.Device == device && d.NetworkData != nil {
				return d
			}
		}
		if time.Now().After(deadline) {
			n.t.Errorf("claim %s has no networkData for %s after %s", rc.Name, device, reportWait)
			return &resourcev1.AllocatedDeviceStatus{}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkReleased checks, after the pod is gone, that each NIC is back on the
// host (the very one) and that no claim that is left holds an entry (the
// driver writes none; a claim made from a template goes with its pod).
func (n *draNode) checkReleased(rcs map[string]*resourcev1.ResourceClaim, nics ...int) {
	t := n.t
	t.Helper()
	for _, i := range nics {
		nic := n.driver.NICs[i]
		deadline := time.Now().Add(reportWait)
		for !testenv.HostLinkExists(nic.IfName) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		l, err := netlink.LinkByName(nic.IfName)
		if err != nil || l.Attrs().HardwareAddr.String() != n.macs[nic.IfName] {
			t.Errorf("NIC %s not back on the host as it was: %v", nic.IfName, err)
		}
	}
	for _, rc := range rcs {
		got, err := n.k8s.ResourceV1().ResourceClaims(rc.Namespace).Get(n.ctx(), rc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Devices) != 0 {
			t.Errorf("status.devices of %s after the pod went: %+v, want none", rc.Name, got.Status.Devices)
		}
	}
}

// A pod that names no node, with a claim of one NIC from a template and a
// NAD of host-device naming the claim as Multus does (resourceName), is
// scheduled onto the node and gets that very interface as net2.
func draOneNIC(n *draNode) {
	t := n.t
	n.hostDeviceNAD("dra-nic", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": "nic"})
	p := n.schedulePod(map[string]string{annotNetworks: "dra-nic"}, map[string]claimSpec{"nic": {requests: 1, template: true}})
	rcs := n.podClaims(p)
	p = n.waitRunning(p)
	if p.Spec.NodeName != n.name {
		t.Errorf("pod bound to %q, want %s", p.Spec.NodeName, n.name)
	}
	nic := n.nicOf(rcs["nic"], "r0")
	n.checkAttached(p, rcs, map[string]int{"net2": nic})

	// The real kubelet reports the claim through PodResources, as
	// manifold reads it when no attribute names a device.
	c := &podresources.Client{Socket: filepath.Join(n.kubelet.RootDir(), "pod-resources", "kubelet.sock")}
	defer c.Close()
	res, _, err := c.Resources(n.ctx(), podresources.Pod{Namespace: p.Namespace, Name: p.Name})
	if err != nil || len(res.Claims) != 1 || res.Claims[0].Name != rcs["nic"].Name || len(res.Claims[0].Devices) != 1 || res.Claims[0].Devices[0].Device != n.driver.NICs[nic].Device {
		t.Errorf("the kubelet's PodResources: %+v, %v; want claim %s with %s", res.Claims, err, rcs["nic"].Name, n.driver.NICs[nic].Device)
	}
	if devs, _ := n.driver.Prepared(rcs["nic"].UID); !slices.Equal(devs, []string{n.driver.NICs[nic].Device}) {
		t.Errorf("the driver prepared %v for the claim", devs)
	}

	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkReleased(rcs, nic)
}

// Two claims, one of them with two requests: claim a is a ResourceClaim of
// the test's own that a NAD names by its own name (Multus v4.3.0's form),
// claim b comes from a template and each of its requests is named by a NAD
// with the precise annotation.
func draTwoClaims(n *draNode) {
	own := testenv.UniqueName("own-nic-")
	n.hostDeviceNAD("dra-a", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": own})
	n.hostDeviceNAD("dra-b0", nextSubnet(), map[string]string{netconf.AnnotResourceClaim: "b/r0"})
	n.hostDeviceNAD("dra-b1", nextSubnet(), map[string]string{netconf.AnnotResourceClaim: "b/r1"})
	// net3 names request r1 and net4 r0, so that the results' order is not
	// what decides.
	p := n.schedulePod(map[string]string{annotNetworks: "dra-a, dra-b1, dra-b0"},
		map[string]claimSpec{"a": {requests: 1, name: own}, "b": {requests: 2, template: true}})
	rcs := n.podClaims(p)
	p = n.waitRunning(p)
	want := map[string]int{"net2": n.nicOf(rcs["a"], "r0"), "net3": n.nicOf(rcs["b"], "r1"), "net4": n.nicOf(rcs["b"], "r0")}
	n.checkAttached(p, rcs, want)
	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkReleased(rcs, want["net2"], want["net3"], want["net4"])
}

// NADs that name no claim of the pod but a resourceName, with a domain
// (openshift.io/host-device-net) and without one (sriov_nic_2), as the
// SR-IOV DRA driver's users write them, get the NICs whose
// k8s.cni.cncf.io/resourceName attribute is that name, from two claims
// made from templates whose requests select NICs by that attribute.
func draByResourceName(n *draNode) {
	n.hostDeviceNAD("dra-hd", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": hostDeviceNet})
	n.hostDeviceNAD("dra-n2", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": "sriov_nic_2"})
	p := n.schedulePod(map[string]string{annotNetworks: "dra-n2, dra-hd"}, map[string]claimSpec{
		"vf": {requests: 1, template: true, resourceName: hostDeviceNet}, "other": {requests: 1, template: true, resourceName: "sriov_nic_2"}})
	rcs := n.podClaims(p)
	p = n.waitRunning(p)
	want := map[string]int{"net2": n.nicOf(rcs["other"], "r0"), "net3": n.nicOf(rcs["vf"], "r0")}
	if want["net2"] != 2 {
		n.t.Errorf("claim other was allocated NIC %d, want 2, the one of resourceName sriov_nic_2", want["net2"])
	}
	n.checkAttached(p, rcs, want)
	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkReleased(rcs, want["net2"], want["net3"])
}

// A pod that asks for an extended resource that a DeviceClass backs with
// DRA (<class>/nic, with no device plugin of that name) gets a NIC from the
// claim the scheduler makes for it; a NAD whose resourceName is that
// extended resource attaches that very NIC, found through the pod's
// status.extendedResourceClaimStatus.
func draExtendedResource(n *draNode) {
	t := n.t
	res := n.class + "/nic"
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "ext." + n.class}, Spec: resourcev1.DeviceClassSpec{
		Selectors:            []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", n.class)}}},
		ExtendedResourceName: &res}}
	if _, err := n.k8s.ResourceV1().DeviceClasses().Create(n.ctx(), dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.k8s.ResourceV1().DeviceClasses().Delete(context.Background(), dc.Name, metav1.DeleteOptions{})
	})
	n.hostDeviceNAD("dra-ext", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": res})
	grace := int64(1)
	one := corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("dra-"), Namespace: n.ns, Annotations: map[string]string{annotNetworks: "dra-ext"}},
		Spec: corev1.PodSpec{
			DNSPolicy: corev1.DNSDefault, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: crinode.ImageRef, ImagePullPolicy: corev1.PullNever, Command: []string{crinode.Pause},
				Resources: corev1.ResourceRequirements{Requests: one, Limits: one}}},
		},
	}
	p, err := n.k8s.CoreV1().Pods(n.ns).Create(n.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p = n.waitRunning(p)
	ext := p.Status.ExtendedResourceClaimStatus
	if ext == nil || len(ext.RequestMappings) != 1 || ext.RequestMappings[0].ResourceName != res {
		t.Fatalf("the pod's extendedResourceClaimStatus %+v, want one mapping of %s", ext, res)
	}
	rc, err := n.k8s.ResourceV1().ResourceClaims(n.ns).Get(n.ctx(), ext.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rcs := map[string]*resourcev1.ResourceClaim{"extended": rc}
	nic := n.nicOf(rc, ext.RequestMappings[0].RequestName)
	n.checkAttached(p, rcs, map[string]int{"net2": nic})
	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkReleased(rcs, nic)
}

// A pod with more networks on a claim than it has devices does not start:
// manifold's code-7 message is in the FailedCreatePodSandBox event, and the
// NIC stays on the host.
func draTooFew(n *draNode) {
	t := n.t
	n.hostDeviceNAD("dra-few", nextSubnet(), map[string]string{"k8s.v1.cni.cncf.io/resourceName": "nic"})
	p := n.schedulePod(map[string]string{annotNetworks: "dra-few, dra-few"}, map[string]claimSpec{"nic": {requests: 1, template: true}})
	rcs := n.podClaims(p)
	nic := n.nicOf(rcs["nic"], "r0")
	want := "2 network(s) draw a device from it"
	deadline := time.Now().Add(nodeWait)
	for {
		failed := eventsOf(n.events(p), corev1.EventTypeWarning, "FailedCreatePodSandBox")
		if len(failed) > 0 {
			if !strings.Contains(failed[0].Message, want) || !strings.Contains(failed[0].Message, `claim "nic"`) {
				t.Errorf("FailedCreatePodSandBox event %q does not hold manifold's %q", failed[0].Message, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no FailedCreatePodSandBox event after %s; events: %v", nodeWait, eventMessages(n.events(p)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !testenv.HostLinkExists(n.driver.NICs[nic].IfName) {
		t.Errorf("NIC %s left the host for a pod that did not start", n.driver.NICs[nic].IfName)
	}
	n.deleteAndWait(p)
	n.waitEmpty()
	n.checkReleased(rcs, nic)
}
