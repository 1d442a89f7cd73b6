package main

import (
	"fmt"
	"time"
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
	// The pod's object is left as it was: the runtime passes the
	// annotations the pod was created with.
	if _, err := b.patchPod(p, "annotations", touchAnnotation, fmt.Sprint(b.seq.Add(1))); err != nil {
		return err
	}
	select {
	case <-b.ctx.Done():
		return b.ctx.Err()
	case <-time.After(freshDelay):
		return nil
	}
}
