package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// freshDelay is how long before each ADD the fresh-pod section writes to the
// pod. On a node, the kubelet writes a pod's status as it starts to sync the
// pod, and the runtime's CNI ADD follows once the pod's volumes are mounted:
// within milliseconds for a pod with no volumes to wait for. The overhead
// section's pods were last written long before their ADDs, which is the best
// case for any read that is tied to the pod's version.
const freshDelay = 10 * time.Millisecond

// touchAnnotation is the annotation the fresh-pod section writes.
const touchAnnotation = "bench.manifold.io/touched"

// touchPod writes to the pod, so that its resourceVersion moves as a status
// update's would, then waits freshDelay. Nothing manifold reads changes.
func (b *bench) touchPod(p *podSpec) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		touchAnnotation: fmt.Sprint(b.seq.Add(1)),
	}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := b.k8s.CoreV1().Pods(p.Obj.Namespace).Patch(ctx, p.Obj.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("touch pod %s: %w", p.Obj.Name, err)
	}
	select {
	case <-b.ctx.Done():
		return b.ctx.Err()
	case <-time.After(freshDelay):
		return nil
	}
}
