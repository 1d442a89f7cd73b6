package main

import (
	"fmt"
	"slices"
	"time"
)

// verbResult compares one verb of manifold with the direct reference.
type verbResult struct {
	Manifold  dist `json:"manifold"`
	Reference dist `json:"reference"`
	// RatioP50 is manifold's median over the reference's median.
	RatioP50 float64 `json:"ratio_p50"`
	// Overhead is the per-iteration difference manifold minus reference
	// (each iteration measures both, back to back).
	Overhead dist `json:"overhead"`
	// Own is manifold's own time: its process lifetime minus the time when
	// at least one delegate process it started existed, from kernel process
	// events. Before,
	// Between and After split it: up to the first delegate, between
	// delegates, and after the last one.
	Own       *dist `json:"manifold_own,omitempty"`
	Before    *dist `json:"own_before_first_delegate,omitempty"`
	Between   *dist `json:"own_between_delegates,omitempty"`
	After     *dist `json:"own_after_last_delegate,omitempty"`
	Delegates *dist `json:"delegates_in_manifold,omitempty"`
	// Thick is thick mode's wall time (shim and daemon), from the same
	// interleaved iterations, and ThickRatioP50 its median over the reference's.
	Thick         *dist   `json:"thick,omitempty"`
	ThickRatioP50 float64 `json:"thick_ratio_p50,omitempty"`
	// ThickConcurrent is thick mode with concurrentAttachments on, from
	// the same iterations, and its median over the reference's.
	ThickConcurrent         *dist   `json:"thick_concurrent,omitempty"`
	ThickConcurrentRatioP50 float64 `json:"thick_concurrent_ratio_p50,omitempty"`
	// Baseline and BaselineOwn are the -baseline binary's figures, from the
	// same interleaved iterations.
	Baseline    *dist `json:"baseline,omitempty"`
	BaselineOwn *dist `json:"baseline_own,omitempty"`
	// ThickBaseline is the thick baseline arm (-baseline and/or
	// -baseline-shim), from the same iterations, and its ratio to Reference.
	ThickBaseline         *dist   `json:"thick_baseline,omitempty"`
	ThickBaselineRatioP50 float64 `json:"thick_baseline_ratio_p50,omitempty"`
}

// overheadResult is one delegate set and network count.
type overheadResult struct {
	Delegates  string `json:"delegates"`
	Networks   int    `json:"networks"`
	Iterations int    `json:"iterations"`
	// DelPause is -del-pause, when it is set: each DEL came that long after
	// its ADD.
	DelPause string     `json:"del_pause,omitempty"`
	Add      verbResult `json:"add"`
	Del      verbResult `json:"del"`
	// PeakRSSKiB is the median and largest peak RSS of manifold ADD processes
	// started through the shim; DelegatePeakRSSKiB the largest of any
	// delegate. manifold's figure covers its delegates too (ru_maxrss), so it
	// is manifold's own whenever it exceeds DelegatePeakRSSKiB.
	PeakRSSKiB         int64 `json:"manifold_add_peak_rss_kib"`
	MedianRSSKiB       int64 `json:"manifold_add_median_peak_rss_kib"`
	RSSSamples         int   `json:"rss_samples"`
	DelegatePeakRSSKiB int64 `json:"delegate_peak_rss_kib"`
	// DaemonCPUPerAddDel is the thick arm's daemon's CPU time (user and
	// system, all its threads) per recorded ADD and DEL, in ms: the mean
	// over the recorded iterations, read from /proc around each thick ADD
	// and DEL. It includes the status write, which the DEL waits for.
	DaemonCPUPerAddDel float64 `json:"thick_daemon_cpu_ms_per_add_del,omitempty"`
	// BaselineDaemonCPUPerAddDel is the same for the thick baseline arm,
	// and ConcurrentDaemonCPUPerAddDel for the concurrentAttachments arm.
	BaselineDaemonCPUPerAddDel   float64 `json:"thick_baseline_daemon_cpu_ms_per_add_del,omitempty"`
	ConcurrentDaemonCPUPerAddDel float64 `json:"thick_concurrent_daemon_cpu_ms_per_add_del,omitempty"`
	// FloorCPUPerAddDel is the same for the floor arm's process, which
	// runs the same delegates through libcni and does nothing else
	// (bench/floor.go): what these delegates cost a Go process at the
	// least, beside the daemon's figure.
	FloorCPUPerAddDel float64 `json:"floor_cpu_ms_per_add_del,omitempty"`
	// DaemonMem and BaselineDaemonMem are the thick arm's daemon's and the
	// thick baseline's resident memory at the end of the recorded
	// iterations: what a daemon between calls holds, and its peak.
	DaemonMem         *procMem `json:"thick_daemon_memory,omitempty"`
	BaselineDaemonMem *procMem `json:"thick_baseline_daemon_memory,omitempty"`
}

type verbSamples struct {
	manifold, reference, overhead             []time.Duration
	own, before, between, after, delegateTime []time.Duration
	baseline, baselineOwn                     []time.Duration
	thick, thickBaseline, thickConcurrent     []time.Duration
}

func (v *verbSamples) result() verbResult {
	r := verbResult{
		Manifold:  summarize(v.manifold),
		Reference: summarize(v.reference),
		Overhead:  summarize(v.overhead),
	}
	r.RatioP50 = ratio(r.Manifold.P50, r.Reference.P50)
	if len(v.own) > 0 {
		own, before, between, after, dt := summarize(v.own), summarize(v.before), summarize(v.between), summarize(v.after), summarize(v.delegateTime)
		r.Own, r.Before, r.Between, r.After, r.Delegates = &own, &before, &between, &after, &dt
	}
	if len(v.thick) > 0 {
		thick := summarize(v.thick)
		r.Thick, r.ThickRatioP50 = &thick, ratio(thick.P50, r.Reference.P50)
	}
	if len(v.thickConcurrent) > 0 {
		conc := summarize(v.thickConcurrent)
		r.ThickConcurrent, r.ThickConcurrentRatioP50 = &conc, ratio(conc.P50, r.Reference.P50)
	}
	if len(v.thickBaseline) > 0 {
		base := summarize(v.thickBaseline)
		r.ThickBaseline, r.ThickBaselineRatioP50 = &base, ratio(base.P50, r.Reference.P50)
	}
	if len(v.baseline) > 0 {
		base := summarize(v.baseline)
		r.Baseline = &base
	}
	if len(v.baselineOwn) > 0 {
		own := summarize(v.baselineOwn)
		r.BaselineOwn = &own
	}
	return r
}

func (v *verbSamples) add(m, r sample, timed bool) {
	v.manifold = append(v.manifold, m.Wall)
	v.reference = append(v.reference, r.Wall)
	v.overhead = append(v.overhead, m.Wall-r.Wall)
	if timed {
		v.own = append(v.own, m.Own())
		v.before = append(v.before, m.Proc.Before)
		v.between = append(v.between, m.Proc.Between)
		v.after = append(v.after, m.Proc.After)
		v.delegateTime = append(v.delegateTime, m.Proc.Delegates)
	}
}

// overhead measures ADD and DEL of one pod in interleaved arms: manifold,
// the direct reference, thick mode and any baselines. Every iteration runs
// each arm once (ADD, then DEL), and the arms take turns at going first, so a
// noisy moment hits all alike. The first warmup iterations are not recorded.
// Then rssRuns more ADD/DELs go through the shim, for manifold's peak memory.
//
// With fresh, the pod is written to freshDelay before every ADD of every arm
// (touchPod), as the kubelet's status update comes shortly before a sandbox's
// ADD, and the pod gets a name of its own.
func (b *bench) overhead(kind string, networks, iterations, warmup, rssRuns int, fresh bool) (*overheadResult, error) {
	name := fmt.Sprintf("bench-%s-%d", kind, networks)
	if fresh {
		name = fmt.Sprintf("fresh-%s-%d", kind, networks)
	}
	pod, err := b.createPod(name, kind, networks)
	if err != nil {
		return nil, err
	}
	netns, err := b.newNetNS()
	if err != nil {
		return nil, err
	}
	res := &overheadResult{Delegates: kind, Networks: networks, Iterations: iterations}
	// -del-pause is the overhead section's, not the fresh pods'.
	var pause time.Duration
	if !fresh && b.delPause > 0 {
		pause = b.delPause
		res.DelPause = pause.String()
	}
	var add, del verbSamples
	arms := []string{armManifold, armDirect, armThick, armThickConcurrent, armFloor}
	if b.baseline != "" {
		arms = append(arms, armBaseline)
	}
	if b.thickBase != nil {
		arms = append(arms, armThickBaseline)
	}
	var cpu *overheadCPU
	for it := -warmup; it < iterations; it++ {
		if err := b.ctx.Err(); err != nil {
			return nil, err
		}
		if it == 0 {
			if cpu, err = b.startOverheadCPU(arms); err != nil {
				return nil, err
			}
		}
		got := map[string][2]sample{}
		for k := range arms {
			arm := arms[(it+warmup+k)%len(arms)]
			if fresh {
				if err := b.touchPod(pod); err != nil {
					return nil, err
				}
			}
			a, d, err := b.addDel(arm, pod, netns.Path(), pause)
			if err != nil {
				return nil, err
			}
			got[arm] = [2]sample{a, d}
		}
		if b.watch != nil {
			b.watch.pruneRoot()
		}
		if it < 0 {
			continue
		}
		for i, v := range []*verbSamples{&add, &del} {
			v.add(got[armManifold][i], got[armDirect][i], b.watch != nil)
			v.thick = append(v.thick, got[armThick][i].Wall)
			v.thickConcurrent = append(v.thickConcurrent, got[armThickConcurrent][i].Wall)
			if base, ok := got[armBaseline]; ok {
				v.baseline = append(v.baseline, base[i].Wall)
				if b.watch != nil {
					v.baselineOwn = append(v.baselineOwn, base[i].Own())
				}
			}
			if base, ok := got[armThickBaseline]; ok {
				v.thickBaseline = append(v.thickBaseline, base[i].Wall)
			}
		}
	}
	res.Add, res.Del = add.result(), del.result()
	if cpu != nil {
		used, err := cpu.stop()
		if err != nil {
			return nil, err
		}
		perCall := func(arm string) float64 { return ms(used[arm]) / float64(iterations) }
		res.DaemonCPUPerAddDel = perCall(armThick)
		res.ConcurrentDaemonCPUPerAddDel = perCall(armThickConcurrent)
		res.FloorCPUPerAddDel = perCall(armFloor)
		if b.thickBase != nil {
			res.BaselineDaemonCPUPerAddDel = perCall(armThickBaseline)
		}
	}
	if res.DaemonMem, err = processMem(b.cpuPIDOf(armThick)); err != nil {
		return nil, err
	}
	if b.thickBase != nil {
		if res.BaselineDaemonMem, err = processMem(b.cpuPIDOf(armThickBaseline)); err != nil {
			return nil, err
		}
	}

	var rss []int64
	for i := 0; i < rssRuns; i++ {
		a, _, err := b.addDel(armShim, pod, netns.Path(), 0)
		if err != nil {
			return nil, err
		}
		rss = append(rss, a.MaxRSSKiB)
		res.DelegatePeakRSSKiB = max(res.DelegatePeakRSSKiB, a.DelegateMaxRSSKiB)
	}
	if len(rss) > 0 {
		slices.Sort(rss)
		res.RSSSamples, res.PeakRSSKiB, res.MedianRSSKiB = len(rss), rss[len(rss)-1], rss[len(rss)/2]
	}
	return res, nil
}

// addDel runs ADD then, pause later, DEL of a fresh sandbox of pod in one
// arm. A failed ADD is cleaned up with a DEL before the error is returned.
func (b *bench) addDel(arm string, pod *podSpec, netns string, pause time.Duration) (sample, sample, error) {
	sb := b.newSandbox(pod, netns)
	a, err := b.add(b.ctx, arm, sb)
	if err != nil {
		_, _ = b.del(b.ctx, arm, sb)
		return a, sample{}, err
	}
	time.Sleep(pause)
	d, err := b.del(b.ctx, arm, sb)
	return a, d, err
}
