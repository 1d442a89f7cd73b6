package cluster_test

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/dradriver"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
)

// The claim a device pod names, and the NAD that draws its device: Multus's
// resourceName form, a claim of the pod by its name (docs/devices.md).
const (
	deviceClaim    = "nic"
	deviceNetworks = "blue, nic"
)

// deviceNetwork gives the test's pods a network on a device, as a node with
// a NIC driver would: the tests' DRA driver (e2e/dradriver) registered with
// the node's kubelet, publishing one stand-in NIC (a veth end on the host)
// with a PCI address, a DeviceClass of it, a ResourceClaimTemplate of one
// such NIC, and the NAD "nic" naming the pods' claim. The NAD's plugin is a
// macvlan on the green parent, which ignores the device; manifold writes the
// attachment's Device Info file from the device's PCI address before it
// runs, and its DEL removes it. It returns the template's name. Its
// cleanup deletes the device pods left (while the driver can still
// unprepare their claims), then the driver and the class.
func (e *tenv) deviceNetwork() string {
	e.t.Helper()
	driver := testenv.UniqueName("nic") + ".dra.manifold.test"
	dataDir, err := os.MkdirTemp("", "dra") // short: it holds a unix socket
	if err != nil {
		e.t.Fatal(err)
	}
	d, err := dradriver.Start(context.Background(), dradriver.Options{Driver: driver, NodeName: e.c.NodeName, Client: e.c.Clientset(),
		KubeletRootDir: e.c.Kubelet.RootDir(), DataDir: dataDir, NICs: 1, Prefix: testenv.UniqueName("cln")[:9]})
	if err != nil {
		os.RemoveAll(dataDir)
		e.t.Fatal(err)
	}
	cs := e.c.Clientset()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	_, dcErr := cs.ResourceV1().DeviceClasses().Create(e.ctx(), dc, metav1.CreateOptions{})
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), podWait)
		defer cancel()
		if pods, err := cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
			var list []*corev1.Pod
			for i := range pods.Items {
				if len(pods.Items[i].Spec.ResourceClaims) > 0 {
					list = append(list, &pods.Items[i])
				}
			}
			if err := e.c.DeleteAndWait(ctx, podWait, list...); err != nil {
				e.t.Logf("clean-up: %v", err)
			}
		}
		if errs := d.Errors(); e.t.Failed() && len(errs) > 0 {
			e.t.Logf("DRA driver errors: %v", errs)
		}
		d.Stop()
		os.RemoveAll(dataDir)
		_ = cs.ResourceV1().DeviceClasses().Delete(context.Background(), driver, metav1.DeleteOptions{})
	})
	if dcErr != nil {
		e.t.Fatal(dcErr)
	}
	// The pool is published once the kubelet has registered the driver.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := cs.ResourceV1().ResourceSlices().List(e.ctx(), metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
		if err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 1 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the DRA driver's ResourceSlice was not published in 2m (%v); driver errors: %v", err, d.Errors())
		}
		time.Sleep(200 * time.Millisecond)
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "nic", Namespace: e.ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx(), tmpl, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	n := nadv1.New(e.ns, "nic", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":"10.245.2.0/24"}}`, greenNetwork, greenParent))
	n.Annotations = map[string]string{"k8s.v1.cni.cncf.io/resourceName": deviceClaim}
	obj, err := n.ToUnstructured()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.CP.Dynamic().Resource(controlplane.NADResource).Namespace(e.ns).Create(e.ctx(), obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create NAD nic: %v", err)
	}
	return tmpl.Name
}

// createDevicePod creates a pod that asks for the blue network and the
// device network (deviceNetwork): eth0, net1 and net2, as createPod's pods,
// with its claim "nic" made from the template.
func (e *tenv) createDevicePod(prefix, template string) (*corev1.Pod, error) {
	p := cluster.PodSpec(e.ns, testenv.UniqueName(prefix), map[string]string{cluster.NetworksAnnotation: deviceNetworks})
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: deviceClaim, ResourceClaimTemplateName: &template}}
	return e.c.Clientset().CoreV1().Pods(e.ns).Create(e.ctx(), p, metav1.CreateOptions{})
}
