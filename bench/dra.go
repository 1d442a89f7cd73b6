package main

// The DRA section (docs/devices.md): what finding a pod's DRA device costs an
// ADD, the write-back of its claim's status included. The same pod shape, one
// network whose NAD names the pod's claim against one whose NAD names none,
// in thin and thick mode: a real ResourceClaim, allocated and reserved for the
// pod as the scheduler would, and a real ResourceSlice on the bench's API
// server; the kubelet is podresourcestest's fake, reporting the claim.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// benchDRADriver is the DRA driver of the section's ResourceSlice.
const benchDRADriver = "dra.bench.manifold.io"

// runDRA runs the with/without loop (withWithout) for a network whose NAD
// names the pod's claim, against one whose NAD names none.
func runDRA(b *bench, s settings, r *report) error {
	keys, err := b.deviceKeys("dra")
	if err != nil {
		return err
	}
	if err := b.macvlanNADs("bench-dra", 3, map[string]string{netconf.AnnotResourceClaim: "nic"}); err != nil {
		return err
	}
	if err := b.draSlice(); err != nil {
		return err
	}
	claim, err := b.draClaim("bench-dra-nic")
	if err != nil {
		return err
	}
	with, err := b.createClaimPod("dra-bench-dra-with", "nic", claim)
	if err == nil {
		err = b.setNetworks(with, "bench-dra-with")
	}
	if err != nil {
		return err
	}
	without, err := b.createPod("dra-bench-dra-without", kindReal, 1)
	if err == nil {
		err = b.setNetworks(without, "bench-dra-without")
	}
	if err != nil {
		return err
	}
	calls, err := b.fakeKubelet(keys, with, podresourcestest.Container{Name: "pause", Claims: []podresourcestest.Claim{{Namespace: namespace, Name: claim.Name,
		Devices: []podresourcestest.ClaimDevice{{Driver: benchDRADriver, Pool: benchNode, Device: "nic-0"}}}}})
	if err != nil {
		return err
	}
	modes, err := b.deviceModes("dra", keys)
	if err != nil {
		return err
	}
	return b.withWithout(r, "dra", s.deviceIterations, s.warmup, map[bool]*podSpec{true: with, false: without}, modes, calls, "DRA: ADD of a network that draws a DRA device, against one that does not",
		"ADD wall time of a pod with the default network (bridge) and one macvlan NAD that names the pod's claim (manifold-cni.github.io/resource-claim), against a pod whose NAD names none; the claim is read, the driver's ResourceSlices on the node listed, and the claim's status.devices written (in thin mode before ADD answers, in thick mode after); the device's standard PCI attribute names it, so the kubelet (podresourcestest's fake) is not asked")
}

// draSlice publishes bench-node's pool of benchDRADriver: nic-0, with a
// standard PCI address.
func (b *bench) draSlice() error {
	node, pci := benchNode, "0000:3b:02.1"
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "bench-dra"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: benchDRADriver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: benchNode, Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "nic-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"resource.kubernetes.io/pciBusID": {StringValue: &pci}}}},
	}}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := b.k8s.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceSlice: %w", err)
	}
	b.onCleanup(func() {
		_ = b.k8s.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
	})
	return nil
}

// draClaim makes ResourceClaim name of one request, allocated nic-0 on
// bench-node as the scheduler would.
func (b *bench) draClaim(name string) (*resourcev1.ResourceClaim, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	claims := b.k8s.ResourceV1().ResourceClaims(namespace)
	rc, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "nic",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: benchDRADriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create ResourceClaim %s: %w", name, err)
	}
	rc.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "nic", Driver: benchDRADriver, Pool: benchNode, Device: "nic-0"}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{benchNode}}}}}}}
	if rc, err = claims.UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("allocate ResourceClaim %s: %w", name, err)
	}
	return rc, nil
}

// createClaimPod is createPod's pod with claim podClaim naming rc, which is
// then reserved for it.
func (b *bench) createClaimPod(name, podClaim string, rc *resourcev1.ResourceClaim) (*podSpec, error) {
	p, err := b.createPodWith(name, kindReal, nil, corev1.PodResourceClaim{Name: podClaim, ResourceClaimName: &rc.Name})
	if err != nil {
		return nil, err
	}
	p.Networks = 1
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	rc.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Obj.Name, UID: p.Obj.UID}}
	if _, err := b.k8s.ResourceV1().ResourceClaims(namespace).UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("reserve ResourceClaim %s: %w", rc.Name, err)
	}
	return p, nil
}
