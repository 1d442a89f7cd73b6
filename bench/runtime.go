package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// runtimeResult is the figure a user feels: the time from RunPodSandbox to a
// ready sandbox, through a real containerd 2.x with runc (e2e/crinode), with
// containerd calling manifold (thin and thick) and, as the reference, with
// containerd calling the same default network's conflist itself. Each arm
// has its own containerd; the arms take turns within every round.
type runtimeResult struct {
	Rounds    int    `json:"rounds"`
	Delegates string `json:"delegates"`
	// Direct is containerd calling the delegates' conflist itself.
	Direct   dist `json:"direct"`
	Manifold dist `json:"manifold"`
	Thick    dist `json:"thick"`
	// Ratios of medians to Direct's; Overhead is the per-round difference
	// manifold minus direct.
	RatioP50      float64 `json:"ratio_p50"`
	ThickRatioP50 float64 `json:"thick_ratio_p50"`
	Overhead      dist    `json:"overhead"`
	// PairedRatioP50 is the median over rounds of manifold's time over
	// direct's in the same round, which the load of the moment affects less
	// than the ratio of the medians.
	PairedRatioP50      float64 `json:"paired_ratio_p50"`
	ThickPairedRatioP50 float64 `json:"thick_paired_ratio_p50"`
	Note                string  `json:"note"`
}

// runtimeArm is one containerd and the conflist in its conf dir.
type runtimeArm struct {
	name string
	node *crinode.Containerd
}

// startRuntimeArm starts a containerd whose CNI conf dir holds conflist and
// whose CNI bin dir is binDir.
func (b *bench) startRuntimeArm(name, binDir string, conflist []byte) (*runtimeArm, error) {
	bins, err := crinode.FindBinaries()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.dir, "runtime-"+name)
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "00-"+name+".conflist"), conflist, 0o644); err != nil {
		return nil, err
	}
	node, err := crinode.Start(b.ctx, bins, crinode.Options{CNIBinDir: binDir, CNIConfDir: confDir, TempDir: dir})
	if err != nil {
		return nil, fmt.Errorf("containerd for %s: %w", name, err)
	}
	b.onCleanup(node.Stop)
	// containerd loads the conf dir in the background.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready, _, msg, err := node.NetworkReady(b.ctx)
		if err == nil && ready {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("containerd for %s: network not ready after 30s: %s %v", name, msg, err)
		}
	}
	return &runtimeArm{name: name, node: node}, nil
}

// sandboxes measures rounds of RunPodSandbox → ready on each arm, the arms in
// a rotating order, each sandbox stopped and removed (not timed) before the
// next.
func (b *bench) sandboxes(rounds, warmup int) (*runtimeResult, error) {
	manifoldList, err := b.manifoldConfList(kindReal, b.binDir)
	if err != nil {
		return nil, err
	}
	thickList, err := b.thickConfList(kindReal, b.thick)
	if err != nil {
		return nil, err
	}
	direct, err := b.startRuntimeArm("direct", b.binDir, []byte(b.networkDef(kindReal, 0).Conf))
	if err != nil {
		return nil, err
	}
	thin, err := b.startRuntimeArm("manifold", b.binDir, manifoldList.Bytes)
	if err != nil {
		return nil, err
	}
	thick, err := b.startRuntimeArm("thick", b.thick.dir, thickList.Bytes)
	if err != nil {
		return nil, err
	}
	arms := []*runtimeArm{direct, thin, thick}
	pod, err := b.createPod("runtime", kindReal, 1)
	if err != nil {
		return nil, err
	}
	annotations := testenv.KubeletAnnotations(pod.Obj.Annotations, pod.Obj.CreationTimestamp.Time)
	walls := make([][]time.Duration, len(arms))
	for round := -warmup; round < rounds; round++ {
		for k := range arms {
			i := (k + round + warmup) % len(arms)
			a := arms[i]
			cfg := a.node.SandboxConfig(pod.Obj.Namespace, pod.Obj.Name, string(pod.Obj.UID), annotations)
			// Each sandbox is a new attempt of the pod, as after a restart.
			cfg.Metadata.Attempt = uint32(round + warmup)
			start := time.Now()
			id, err := a.node.RunSandbox(b.ctx, cfg)
			wall := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s: RunPodSandbox: %w", a.name, err)
			}
			st, err := a.node.Runtime.PodSandboxStatus(b.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.GetNetwork().GetIp() == "" {
				return nil, fmt.Errorf("%s: sandbox %s not ready with an IP after RunPodSandbox: %v %v", a.name, id, st.GetStatus(), err)
			}
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			err = a.node.StopRemove(ctx, id)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			if round >= 0 {
				walls[i] = append(walls[i], wall)
			}
		}
	}
	diff := make([]time.Duration, rounds)
	for i := range diff {
		diff[i] = walls[1][i] - walls[0][i]
	}
	r := &runtimeResult{
		Rounds:    rounds,
		Delegates: "bridge + host-local (the default network)",
		Direct:    summarize(walls[0]),
		Manifold:  summarize(walls[1]),
		Thick:     summarize(walls[2]),
		Overhead:  summarize(diff),
		Note:      "containerd 2.x with runc, native snapshotter, driven over the CRI; one containerd per arm; wall time of RunPodSandbox, which returns once the sandbox is ready with its network",
	}
	r.RatioP50 = ratio(r.Manifold.P50, r.Direct.P50)
	r.ThickRatioP50 = ratio(r.Thick.P50, r.Direct.P50)
	r.PairedRatioP50 = pairedRatio(walls[1], walls[0])
	r.ThickPairedRatioP50 = pairedRatio(walls[2], walls[0])
	return r, nil
}

// pairedRatio is the median of a[i]/b[i].
func pairedRatio(a, b []time.Duration) float64 {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = ratio(ms(a[i]), ms(b[i]))
	}
	slices.Sort(rs)
	return round3(median(rs))
}

// print writes the runtime section of the report.
func (r *runtimeResult) print(w io.Writer) {
	fmt.Fprintf(w, "\nRunPodSandbox to ready through containerd + runc, ms p50 / p99 (%d rounds, arms interleaved; %s)\n", r.Rounds, r.Delegates)
	fmt.Fprintf(w, "  direct (containerd calls the conflist itself)  %s\n", pp(r.Direct))
	fmt.Fprintf(w, "  manifold                                       %s   ratio of p50s %.3f×, per-round ratio p50 %.3f×, overhead p50 %.1f ms\n", pp(r.Manifold), r.RatioP50, r.PairedRatioP50, r.Overhead.P50)
	fmt.Fprintf(w, "  thick (manifold-shim + daemon)                 %s   ratio of p50s %.3f×, per-round ratio p50 %.3f×\n", pp(r.Thick), r.ThickRatioP50, r.ThickPairedRatioP50)
}
