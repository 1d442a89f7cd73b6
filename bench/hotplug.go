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
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/manifold-cni/manifold/internal/testenv"
)

const (
	annotNetworks      = "k8s.v1.cni.cncf.io/networks"
	annotNetworkStatus = "k8s.v1.cni.cncf.io/network-status"
	// benchNode is the spec.nodeName of the benchmark's pods (createPod).
	benchNode = "bench-node"
	// statusWait bounds every wait for network-status.
	statusWait = 30 * time.Second
)

// hotplugResult is the hotplug section: one entry per delegate set.
type hotplugResult struct {
	Rounds int            `json:"rounds"`
	Note   string         `json:"note"`
	Kinds  []*hotplugKind `json:"kinds"`
}

type hotplugKind struct {
	Delegates string `json:"delegates"`
	Network   string `json:"network"`
	// Attach and Detach: the annotation's update (the PATCH sent) to
	// network-status showing the network added, or gone.
	Attach dist `json:"hotplug_attach"`
	Detach dist `json:"hotplug_detach"`
	// FreshAnswer: a fresh ADD of a pod that has the network from the start,
	// to the runtime's answer; FreshStatus: to network-status showing it.
	FreshAnswer dist `json:"fresh_add_answer"`
	FreshStatus dist `json:"fresh_add_status"`
	// RatioP50 is Attach over FreshStatus, by the medians.
	RatioP50 float64 `json:"attach_over_fresh_status_p50"`
}

// sectionDaemon starts manifold as a `manifold daemon` of a section's own:
// its bin dir (the plugins, manifold-shim, and manifold for the shim's
// fallback), its socket, cniDir as its cniDir, and any further flags.
func (b *bench) sectionDaemon(name, manifold, cniDir string, flags ...string) (*thickArm, error) {
	a := &thickArm{dir: filepath.Join(b.dir, name+"-bin"), socket: filepath.Join(b.dir, name+"-daemon", "manifold.sock")}
	for _, d := range []string{a.dir, cniDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := testenv.LinkBinDir(a.dir, b.plugins, manifold); err != nil {
		return nil, err
	}
	shim, err := os.Readlink(filepath.Join(b.thick.dir, "manifold-shim"))
	if err != nil {
		return nil, err
	}
	if err := os.Symlink(shim, filepath.Join(a.dir, "manifold-shim")); err != nil {
		return nil, err
	}
	flags = append([]string{"--bin-dir", a.dir, "--cni-dir", cniDir, "--conf-dir", b.netDir, "--kubeconfig", b.cp.KubeconfigPath}, flags...)
	d, err := testenv.RunDaemon(manifold, a.socket, os.Stderr, flags...)
	if err != nil {
		return nil, err
	}
	a.pid = d.Pid()
	b.onCleanup(func() {
		if err := d.Terminate(); err != nil {
			logf("%v", err)
		}
	})
	a.runtime = libcni.NewCNIConfigWithCacheDir([]string{a.dir}, b.runtimeCache, &benchExec{})
	return a, nil
}

// withKeys is a copy of manifold's config list with keys set in its plugin.
func withKeys(list *libcni.NetworkConfigList, keys map[string]any) (*libcni.NetworkConfigList, error) {
	var raw map[string]any
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		return nil, err
	}
	plugin := raw["plugins"].([]any)[0].(map[string]any)
	for k, v := range keys {
		plugin[k] = v
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(data)
}

// hotplug measures rounds interleaved rounds per delegate set. Each round
// hot-plugs network 1 of the set into a running pod that has only its
// default network, detaches it again, and ADDs (then DELs) a pod that has
// the same network from the start; the two go first in turn.
func (b *bench) hotplug(rounds, warmup int) (*hotplugResult, error) {
	cniDir := filepath.Join(b.dir, "hotplug-cni")
	arm, err := b.sectionDaemon("hotplug", b.manifold, cniDir, "--node-name", benchNode)
	if err != nil {
		return nil, err
	}
	out := &hotplugResult{Rounds: rounds, Note: "thick mode, one daemon watching the node's pods; attach/detach from the annotation's PATCH to network-status showing the change (a pod watch), fresh ADD from the runtime's call to its answer and to network-status showing the network"}
	for _, kind := range []string{kindReal, kindNoop} {
		logf("hotplug: %s delegates, %d rounds", kind, rounds)
		k, err := b.hotplugKind(arm, cniDir, kind, rounds, warmup)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		out.Kinds = append(out.Kinds, k)
	}
	return out, nil
}

func (b *bench) hotplugKind(arm *thickArm, cniDir, kind string, rounds, warmup int) (*hotplugKind, error) {
	conf, err := b.thickConfList(kind, arm)
	if err == nil {
		conf, err = withKeys(conf, map[string]any{"cniDir": cniDir})
	}
	if err != nil {
		return nil, err
	}
	nad := netName(kind, 1)
	running, err := b.createPod("hotplug-running-"+kind, kind, 1)
	if err != nil {
		return nil, err
	}
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

	sbRunning := b.newSandbox(running, nsRunning.Path())
	if err := b.thickCall(arm, conf, "ADD", sbRunning); err != nil {
		return nil, err
	}
	defer b.thickCall(arm, conf, "DEL", sbRunning)
	if _, err := b.timeToStatus(running, without, func() error { return nil }); err != nil {
		return nil, fmt.Errorf("the running pod's status: %w", err)
	}

	k := &hotplugKind{Delegates: kind, Network: namespace + "/" + nad}
	var attach, detach, answer, status []time.Duration
	for i := 0; i < warmup+rounds; i++ {
		var a, d, fa, fs time.Duration
		hot := func() error {
			var err error
			if a, err = b.timeToStatus(running, with, func() error { return b.setNetworks(running, nad) }); err != nil {
				return fmt.Errorf("hot-plug: %w", err)
			}
			if d, err = b.timeToStatus(running, without, func() error { return b.setNetworks(running, "") }); err != nil {
				return fmt.Errorf("hot-unplug: %w", err)
			}
			return nil
		}
		add := func() error {
			// A DEL leaves network-status as it was; without this, the
			// next ADD's status would change nothing that a watch sees.
			if err := b.setAnnotation(fresh, annotNetworkStatus, nil); err != nil {
				return err
			}
			sb := b.newSandbox(fresh, nsFresh.Path())
			var err error
			fs, err = b.timeToStatus(fresh, with, func() error {
				start := time.Now()
				err := b.thickCall(arm, conf, "ADD", sb)
				fa = time.Since(start)
				return err
			})
			if err != nil {
				return fmt.Errorf("fresh ADD: %w", err)
			}
			return b.thickCall(arm, conf, "DEL", sb)
		}
		steps := []func() error{hot, add}
		if i%2 == 1 {
			steps[0], steps[1] = add, hot
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return nil, err
			}
		}
		if i >= warmup {
			attach, detach, answer, status = append(attach, a), append(detach, d), append(answer, fa), append(status, fs)
		}
	}
	k.Attach, k.Detach, k.FreshAnswer, k.FreshStatus = summarize(attach), summarize(detach), summarize(answer), summarize(status)
	k.RatioP50 = ratio(k.Attach.P50, k.FreshStatus.P50)
	return k, nil
}

// thickCall runs ADD or DEL for sb through arm's shim.
func (b *bench) thickCall(arm *thickArm, conf *libcni.NetworkConfigList, verb string, sb *sandbox) error {
	return b.thickCallWithin(arm, conf, verb, sb, time.Minute)
}

// thickCallWithin is thickCall bounded by timeout.
func (b *bench) thickCallWithin(arm *thickArm, conf *libcni.NetworkConfigList, verb string, sb *sandbox, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	rc := &libcni.RuntimeConf{ContainerID: sb.ContainerID, NetNS: sb.NetNS, IfName: "eth0", Args: sb.args(), CapabilityArgs: sb.capabilityArgs()}
	var err error
	if verb == "ADD" {
		_, err = arm.runtime.AddNetworkList(ctx, conf, rc)
	} else {
		err = arm.runtime.DelNetworkList(ctx, conf, rc)
	}
	if err != nil {
		return fmt.Errorf("%s %s of pod %s: %w", verb, sb.ContainerID, sb.Pod.Obj.Name, err)
	}
	return nil
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
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]any{key: value}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	got, err := b.k8s.CoreV1().Pods(p.Obj.Namespace).Patch(ctx, p.Obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch pod %s: %w", p.Obj.Name, err)
	}
	p.Obj = got
	return nil
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

// print writes the section's table; nothing when it did not run.
func (r *hotplugResult) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nHot-plug (thick mode, %d interleaved rounds), ms p50 / p99: the annotation's update to network-status, against a fresh ADD of the same network\n", r.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "delegates\tnetwork\thot-plug attach\thot-plug detach\tfresh ADD answer\tfresh ADD status\tattach / fresh status\t")
	for _, k := range r.Kinds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.3f×\t\n", k.Delegates, k.Network, pp(k.Attach), pp(k.Detach), pp(k.FreshAnswer), pp(k.FreshStatus), k.RatioP50)
	}
	tw.Flush()
}
