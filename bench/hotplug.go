package main

// The hotplug section (docs/hotplug.md): how long a network takes to reach a
// running pod, from the update of its networks annotation to network-status
// showing it, side by side with the same network attached by a fresh ADD,
// from the runtime's call to network-status showing it. Both in thick mode,
// on a daemon of the section's own that watches the node's pods.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	annotNetworks      = "k8s.v1.cni.cncf.io/networks"
	annotNetworkStatus = "k8s.v1.cni.cncf.io/network-status"
	// benchNode is the spec.nodeName of the benchmark's pods (createPod).
	benchNode = "bench-node"
	// statusWait bounds every wait for network-status.
	statusWait = 30 * time.Second
)

// runHotplug measures rounds interleaved rounds per delegate set. Each
// round hot-plugs network 1 of the set into a running pod of its own that has only its
// default network, detaches it again, and ADDs (then DELs) a pod that has
// the same network from the start; the two go first in turn.
func runHotplug(b *bench, s settings, r *report) error {
	cniDir := filepath.Join(b.dir, "hotplug-cni")
	arm, err := b.sectionDaemon("hotplug", b.manifold, cniDir, "--node-name", benchNode)
	if err != nil {
		return err
	}
	var kinds []obj
	var rows []string
	for _, kind := range []string{kindReal, kindNoop} {
		logf("hotplug: %s delegates, %d rounds", kind, s.hotplugRounds)
		st, err := b.hotplugKind(arm, cniDir, kind, s.hotplugRounds, s.warmup)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		network, ratio := namespace+"/"+netName(kind, 1), st.ratio("hot/attach", "fresh/status")
		kinds = append(kinds, obj{{"delegates", kind}, {"network", network},
			{"hotplug_attach", st.dist("hot/attach")}, {"hotplug_detach", st.dist("hot/detach")},
			{"fresh_add_answer", st.dist("fresh/answer")}, {"fresh_add_status", st.dist("fresh/status")},
			{"attach_over_fresh_status_p50", ratio}})
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%.3f×\t", kind, network, pp(st.dist("hot/attach")), pp(st.dist("hot/detach")),
			pp(st.dist("fresh/answer")), pp(st.dist("fresh/status")), ratio))
	}
	r.set("hotplug", obj{{"rounds", s.hotplugRounds}, {"note", "thick mode, one daemon watching the node's pods; attach/detach from the annotation's PATCH to network-status showing the change (a pod watch), fresh ADD from the runtime's call to its answer and to network-status showing the network"},
		{"kinds", kinds}})
	w := r.out("hotplug")
	fmt.Fprintf(w, "\nHot-plug (thick mode, %d interleaved rounds), ms p50 / p99: the annotation's update to network-status, against a fresh ADD of the same network\n", s.hotplugRounds)
	table(w, true, "delegates\tnetwork\thot-plug attach\thot-plug detach\tfresh ADD answer\tfresh ADD status\tattach / fresh status\t", rows)
	return nil
}

func (b *bench) hotplugKind(arm *thickArm, cniDir, kind string, rounds, warmup int) (samples, error) {
	conf, err := b.thickConfList(kind, arm)
	if err == nil {
		conf, err = withKeys(conf, map[string]any{"cniDir": cniDir})
	}
	if err != nil {
		return nil, err
	}
	nad := netName(kind, 1)
	fresh, err := b.createPod("hotplug-fresh-"+kind, kind, 2)
	if err != nil {
		return nil, err
	}
	nsRunning, err := b.newNetNS()
	if err != nil {
		return nil, err
	}
	nsFresh, err := b.newNetNS()
	if err != nil {
		return nil, err
	}
	without := []string{"eth0"}
	with := []string{"eth0", "net1"}

	t := b.trial([]string{"hot", "fresh"}, warmup, rounds)
	return t.run(func(it int, step string, rec record) error {
		if step == "hot" {
			// A running pod of its own each round: the daemon makes a pod
			// whose networks keep changing wait longer between changes
			// (daemon/churn.go), and one hot-plug is what is measured.
			running, err := b.createPod(fmt.Sprintf("hotplug-running-%s-%d", kind, it), kind, 1)
			if err != nil {
				return err
			}
			sb := b.newSandbox(running, nsRunning.Path())
			if err := b.thickCall(arm, conf, "ADD", sb); err != nil {
				return err
			}
			defer b.thickCall(arm, conf, "DEL", sb)
			if _, err := b.timeToStatus(running, without, func() error { return nil }); err != nil {
				return fmt.Errorf("the running pod's status: %w", err)
			}
			d, err := b.timeToStatus(running, with, func() error { return b.setNetworks(running, nad) })
			if err != nil {
				return fmt.Errorf("hot-plug: %w", err)
			}
			rec("attach", d)
			if d, err = b.timeToStatus(running, without, func() error { return b.setNetworks(running, "") }); err != nil {
				return fmt.Errorf("hot-unplug: %w", err)
			}
			rec("detach", d)
			return nil
		}
		// A DEL leaves network-status as it was; without this, the next
		// ADD's status would change nothing that a watch sees.
		if err := b.setAnnotation(fresh, annotNetworkStatus, nil); err != nil {
			return err
		}
		sb := b.newSandbox(fresh, nsFresh.Path())
		d, err := b.timeToStatus(fresh, with, func() error {
			start := time.Now()
			err := b.thickCall(arm, conf, "ADD", sb)
			rec("answer", time.Since(start))
			return err
		})
		if err != nil {
			return fmt.Errorf("fresh ADD: %w", err)
		}
		rec("status", d)
		return b.thickCall(arm, conf, "DEL", sb)
	})
}

// thickCall runs ADD or DEL for sb through arm's shim.
func (b *bench) thickCall(arm *thickArm, conf *libcni.NetworkConfigList, verb string, sb *sandbox) error {
	return b.thickCallWithin(arm, conf, verb, sb, time.Minute)
}

// thickCallWithin is thickCall bounded by timeout.
func (b *bench) thickCallWithin(arm *thickArm, conf *libcni.NetworkConfigList, verb string, sb *sandbox, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return cniCall(ctx, arm.runtime, conf, verb, sb)
}

// setNetworks sets the pod's networks annotation, as a user would.
func (b *bench) setNetworks(p *podSpec, value string) error {
	return b.setAnnotation(p, annotNetworks, value)
}

// setAnnotation sets (or, with nil, removes) one annotation of the pod, and
// keeps the pod's object as the update left it.
func (b *bench) setAnnotation(p *podSpec, key string, value any) error {
	return b.patchMeta(p, "annotations", key, value)
}

// patchMeta sets (or, with nil, removes) one key of the pod's metadata field
// ("annotations", "labels") with a merge patch, as a user or a controller
// would, and keeps the pod's object as the update left it.
func (b *bench) patchMeta(p *podSpec, field, key string, value any) error {
	got, err := b.patchPod(p, field, key, value)
	if err == nil {
		p.Obj = got
	}
	return err
}

// patchPod is patchMeta's patch, which returns the updated pod.
func (b *bench) patchPod(p *podSpec, field, key string, value any) (*corev1.Pod, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]any{key: value}}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	got, err := b.k8s.CoreV1().Pods(p.Obj.Namespace).Patch(ctx, p.Obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch pod %s: %w", p.Obj.Name, err)
	}
	return got, nil
}

// timeToStatus watches the pod from its current version, runs act, and
// returns the time from act's start until the pod's network-status lists
// exactly the interfaces want (or already did before act).
func (b *bench) timeToStatus(p *podSpec, want []string, act func() error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, statusWait)
	defer cancel()
	pods := b.k8s.CoreV1().Pods(p.Obj.Namespace)
	cur, err := pods.Get(ctx, p.Obj.Name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", p.Obj.Name).String(),
		ResourceVersion: cur.ResourceVersion,
	})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	if err := act(); err != nil {
		return 0, err
	}
	if slices.Equal(statusInterfaces(cur), want) {
		return time.Since(start), nil
	}
	last := statusInterfaces(cur)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("pod %s: the watch ended; network-status lists %v, want %v", p.Obj.Name, last, want)
			}
			if ev.Type != watch.Modified {
				continue
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if last = statusInterfaces(pod); slices.Equal(last, want) {
				return time.Since(start), nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("pod %s: network-status lists %v after %s, want %v", p.Obj.Name, last, statusWait, want)
		}
	}
}

// statusInterfaces are the interfaces that the pod's network-status lists,
// in order.
func statusInterfaces(p *corev1.Pod) []string {
	var st []struct {
		Interface string `json:"interface"`
	}
	if err := json.Unmarshal([]byte(p.Annotations[annotNetworkStatus]), &st); err != nil {
		return nil
	}
	out := []string{}
	for _, s := range st {
		out = append(out, s.Interface)
	}
	return out
}
