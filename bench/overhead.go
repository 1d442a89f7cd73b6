package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// shape is one delegate set and network count of the overhead (or the
// fresh-pod) section: its trial's figures by key(arm, verb), with manifold's
// own time under verb+" own" (and " before", " between", " after",
// " delegates"), and what was read of the arms' processes.
type shape struct {
	kind       string
	nets       int
	iterations int
	delPause   time.Duration
	s          samples
	// cpu is the CPU ms per ADD and DEL of each arm that has a process of
	// its own (overheadCPU); mem the thick arms' daemons' memory after it.
	cpu map[string]float64
	mem map[string]*procMem
	// rss is manifold's peak RSS in each shim ADD, sorted; delegateRSS the
	// largest of any delegate's.
	rss         []int64
	delegateRSS int64
}

// overhead measures ADD and DEL of one pod in interleaved arms: manifold,
// the direct reference, thick mode (also with concurrentAttachments), the
// floor and any baselines. Every iteration runs each arm once (ADD, then
// DEL). Then rssRuns more ADD/DELs go through the shim, for manifold's peak
// memory.
//
// With fresh, the pod is written to freshDelay before every ADD of every arm
// (touchPod), as the kubelet's status update comes shortly before a sandbox's
// ADD, and the pod gets a name of its own.
func (b *bench) overhead(kind string, networks, iterations, warmup, rssRuns int, fresh bool) (*shape, error) {
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
	sh := &shape{kind: kind, nets: networks, iterations: iterations, cpu: map[string]float64{}, mem: map[string]*procMem{}}
	// -del-pause is the overhead section's, not the fresh pods'.
	if !fresh {
		sh.delPause = b.delPause
	}
	arms := []string{armManifold, armDirect, armThick, armThickConcurrent, armFloor}
	if b.baseline != "" {
		arms = append(arms, armBaseline)
	}
	if b.thickBase != nil {
		arms = append(arms, armThickBaseline)
	}
	var cpu *overheadCPU
	t := b.trial(arms, warmup, iterations)
	t.before = func() (err error) { cpu, err = b.startOverheadCPU(arms); return err }
	sh.s, err = t.run(func(_ int, arm string, rec record) error {
		if fresh {
			if err := b.touchPod(pod); err != nil {
				return err
			}
		}
		a, d, err := b.addDel(arm, pod, netns.Path(), sh.delPause)
		if err != nil {
			return err
		}
		for verb, s := range map[string]sample{"ADD": a, "DEL": d} {
			rec(verb, s.Wall)
			if b.watch != nil && (arm == armManifold || arm == armBaseline) {
				rec(verb+" own", s.Own())
			}
			if b.watch != nil && arm == armManifold {
				rec(verb+" before", s.Proc.Before)
				rec(verb+" between", s.Proc.Between)
				rec(verb+" after", s.Proc.After)
				rec(verb+" delegates", s.Proc.Delegates)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cpu != nil {
		used, err := cpu.stop()
		if err != nil {
			return nil, err
		}
		for arm, d := range used {
			sh.cpu[arm] = ms(d) / float64(iterations)
		}
	}
	for _, arm := range []string{armThick, armThickBaseline} {
		if m, err := processMem(b.cpuPIDOf(arm)); err != nil {
			return nil, err
		} else if m != nil {
			sh.mem[arm] = m
		}
	}
	for i := 0; i < rssRuns; i++ {
		a, _, err := b.addDel(armShim, pod, netns.Path(), 0)
		if err != nil {
			return nil, err
		}
		sh.rss = append(sh.rss, a.MaxRSSKiB)
		sh.delegateRSS = max(sh.delegateRSS, a.DelegateMaxRSSKiB)
	}
	slices.Sort(sh.rss)
	return sh, nil
}

// k is the key of an arm's figure of a verb, with an optional suffix.
func k(arm, verb string, suffix ...string) string {
	for _, s := range suffix {
		verb += " " + s
	}
	return key(arm, verb)
}

// verbJSON is one verb's figures, each arm against the direct reference.
func (sh *shape) verbJSON(verb string) obj {
	s, ref := sh.s, k(armDirect, verb)
	arm := func(arm string, suffix ...string) any { return s.opt(k(arm, verb, suffix...)) }
	return obj{{"manifold", s.dist(k(armManifold, verb))}, {"reference", s.dist(ref)},
		{"ratio_p50", s.ratio(k(armManifold, verb), ref)}, {"overhead", s.diff(k(armManifold, verb), ref)},
		{"manifold_own", arm(armManifold, "own")}, {"own_before_first_delegate", arm(armManifold, "before")},
		{"own_between_delegates", arm(armManifold, "between")}, {"own_after_last_delegate", arm(armManifold, "after")},
		{"delegates_in_manifold", arm(armManifold, "delegates")},
		{"thick", arm(armThick)}, {"thick_ratio_p50", s.optRatio(k(armThick, verb), ref)},
		{"thick_concurrent", arm(armThickConcurrent)}, {"thick_concurrent_ratio_p50", s.optRatio(k(armThickConcurrent, verb), ref)},
		{"baseline", arm(armBaseline)}, {"baseline_own", arm(armBaseline, "own")},
		{"thick_baseline", arm(armThickBaseline)}, {"thick_baseline_ratio_p50", s.optRatio(k(armThickBaseline, verb), ref)}}
}

func (sh *shape) MarshalJSON() ([]byte, error) {
	var pause, peak, median, thickMem, baseMem any
	if sh.delPause > 0 {
		pause = sh.delPause.String()
	}
	peak, median = int64(0), int64(0)
	if n := len(sh.rss); n > 0 {
		peak, median = sh.rss[n-1], sh.rss[n/2]
	}
	if m := sh.mem[armThick]; m != nil {
		thickMem = m
	}
	if m := sh.mem[armThickBaseline]; m != nil {
		baseMem = m
	}
	return obj{{"delegates", sh.kind}, {"networks", sh.nets}, {"iterations", sh.iterations}, {"del_pause", pause},
		{"add", sh.verbJSON("ADD")}, {"del", sh.verbJSON("DEL")},
		{"manifold_add_peak_rss_kib", peak}, {"manifold_add_median_peak_rss_kib", median},
		{"rss_samples", len(sh.rss)}, {"delegate_peak_rss_kib", sh.delegateRSS},
		{"thick_daemon_cpu_ms_per_add_del", nonZero(sh.cpu[armThick])},
		{"thick_baseline_daemon_cpu_ms_per_add_del", nonZero(sh.cpu[armThickBaseline])},
		{"thick_concurrent_daemon_cpu_ms_per_add_del", nonZero(sh.cpu[armThickConcurrent])},
		{"floor_cpu_ms_per_add_del", nonZero(sh.cpu[armFloor])},
		{"thick_daemon_memory", thickMem}, {"thick_baseline_daemon_memory", baseMem}}.MarshalJSON()
}

// has reports whether the shapes' trials had an arm.
func has(shapes []*shape, arm string) bool {
	return len(shapes) > 0 && len(shapes[0].s[k(arm, "ADD")]) > 0
}

// verbRows writes one line per shape and verb (ADD then DEL), from row.
func verbRows(shapes []*shape, row func(sh *shape, verb string) string) []string {
	var out []string
	for _, sh := range shapes {
		for _, verb := range []string{"ADD", "DEL"} {
			out = append(out, fmt.Sprintf("%s\t%d\t%s\t", sh.kind, sh.nets, verb)+row(sh, verb))
		}
	}
	return out
}

// pairTable is arms a and b (named na and nb) beside the direct reference,
// each with its ratio to it.
func pairTable(w io.Writer, shapes []*shape, na, a, nb, b string) {
	table(w, true, fmt.Sprintf("delegates\tnets\tverb\t%s\t%s\tdirect\t%s/direct\t%s/direct\t", na, nb, na, nb),
		verbRows(shapes, func(sh *shape, verb string) string {
			ref := k(armDirect, verb)
			return fmt.Sprintf("%s\t%s\t%s\t%.3f×\t%.3f×\t", pp(sh.s.dist(k(a, verb))), pp(sh.s.dist(k(b, verb))), pp(sh.s.dist(ref)),
				sh.s.ratio(k(a, verb), ref), sh.s.ratio(k(b, verb), ref))
		}))
}

// printOverhead writes the overhead section's tables.
func printOverhead(w io.Writer, shapes []*shape, starts *processStarts) {
	fmt.Fprintf(w, "\nTime per call, ms, p50 / p99 (arms interleaved; direct = the same delegates called by the runtime itself)\n")
	if p := shapes[0].delPause; p > 0 {
		fmt.Fprintf(w, "(-del-pause: each DEL came %s after its ADD)\n", p)
	}
	table(w, true, "delegates\tnets\tverb\tn\tmanifold\tdirect\tratio p50\toverhead p50\tmanifold own\t\t", verbRows(shapes, func(sh *shape, verb string) string {
		m, ref, own := k(armManifold, verb), k(armDirect, verb), "n/a"
		if len(sh.s[m+" own"]) > 0 {
			own = pp(sh.s.dist(m + " own"))
		}
		return fmt.Sprintf("%d\t%s\t%s\t%.3f×\t%.1f\t%s\t\t", sh.s.dist(m).N, pp(sh.s.dist(m)), pp(sh.s.dist(ref)), sh.s.ratio(m, ref), sh.s.diff(m, ref).P50, own)
	}))
	if len(shapes[0].s[k(armManifold, "ADD", "own")]) > 0 {
		fmt.Fprintf(w, "\nmanifold's own time split, ms p50: before the first delegate / between delegates / after the last; time inside delegates\n")
		table(w, true, "delegates\tnets\tverb\tbefore\tbetween\tafter\tin delegates\t", verbRows(shapes, func(sh *shape, verb string) string {
			p := func(part string) float64 { return sh.s.dist(k(armManifold, verb, part)).P50 }
			return fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.1f\t", p("before"), p("between"), p("after"), p("delegates"))
		}))
	}
	if has(shapes, armThick) {
		fmt.Fprintf(w, "\nThick mode (manifold-shim + manifold daemon) in the same iterations, ms p50 / p99\n")
		pairTable(w, shapes, "thick", armThick, "manifold", armManifold)
		fmt.Fprintf(w, "\nThe daemon's CPU time per ADD and DEL (user and system, all threads, over the recorded iterations and the work put off after them; mean, ms)\n")
		for _, sh := range shapes {
			fmt.Fprintf(w, "  %s, %d nets: %.1f", sh.kind, sh.nets, sh.cpu[armThick])
			if has(shapes, armThickBaseline) {
				fmt.Fprintf(w, " (thick baseline %.1f)", sh.cpu[armThickBaseline])
			}
			if f := sh.cpu[armFloor]; f > 0 {
				fmt.Fprintf(w, "; floor %.1f", f)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  (floor: a Go process that runs the same delegates through libcni and nothing else; bench/floor)\n")
		fmt.Fprintf(w, "The daemon's resident memory after the run, MiB now / peak\n")
		for _, sh := range shapes {
			if m := sh.mem[armThick]; m != nil {
				fmt.Fprintf(w, "  %s, %d nets: %s", sh.kind, sh.nets, m)
				if bm := sh.mem[armThickBaseline]; bm != nil {
					fmt.Fprintf(w, " (thick baseline %s)", bm)
				}
				fmt.Fprintln(w)
			}
		}
	}
	if has(shapes, armThickConcurrent) {
		fmt.Fprintf(w, "\nThick mode with concurrentAttachments, in the same iterations, ms p50 / p99\n")
		pairTable(w, shapes, "concurrent", armThickConcurrent, "thick", armThick)
		fmt.Fprintf(w, "\nThe daemon's CPU time per ADD and DEL with concurrentAttachments (mean, ms)\n")
		for _, sh := range shapes {
			fmt.Fprintf(w, "  %s, %d nets: %.1f\n", sh.kind, sh.nets, sh.cpu[armThickConcurrent])
		}
	}
	printTargets(w, shapes, starts)
	if has(shapes, armThickBaseline) {
		fmt.Fprintf(w, "\nThick baseline (-baseline daemon and/or -baseline-shim) in the same iterations, ms p50 / p99\n")
		pairTable(w, shapes, "thick baseline", armThickBaseline, "thick", armThick)
	}
	if has(shapes, armBaseline) {
		fmt.Fprintf(w, "\nBaseline (-baseline binary) in the same iterations, ms p50 / p99\n")
		table(w, true, "delegates\tnets\tverb\tbaseline\tmanifold\tbaseline own\tmanifold own\t", verbRows(shapes, func(sh *shape, verb string) string {
			base, m := k(armBaseline, verb), k(armManifold, verb)
			bown, own := "n/a", "n/a"
			if len(sh.s[base+" own"]) > 0 && len(sh.s[m+" own"]) > 0 {
				bown, own = pp(sh.s.dist(base+" own")), pp(sh.s.dist(m+" own"))
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t", pp(sh.s.dist(base)), pp(sh.s.dist(m)), bown, own)
		}))
	}
}

// printFresh writes the fresh-pod section's tables.
func printFresh(w io.Writer, shapes []*shape) {
	fmt.Fprintf(w, "\nPods written to %v before each ADD (as by the kubelet's status update), ms p50 / p99\n", freshDelay)
	pairTable(w, shapes, "manifold", armManifold, "thick", armThick)
	if has(shapes, armBaseline) || has(shapes, armThickBaseline) {
		fmt.Fprintf(w, "\nThe same, baseline arms (-baseline, -baseline-shim)\n")
		pairTable(w, shapes, "baseline", armBaseline, "thick baseline", armThickBaseline)
	}
}

// printRSS writes manifold's peak memory in each overhead shape.
func printRSS(w io.Writer, shapes []*shape) {
	fmt.Fprintf(w, "\nPeak RSS of manifold during ADD, MiB (median / largest of the shim runs; largest delegate)\n")
	for _, sh := range shapes {
		var peak, median int64
		if n := len(sh.rss); n > 0 {
			peak, median = sh.rss[n-1], sh.rss[n/2]
		}
		fmt.Fprintf(w, "  %s, %d nets: %.1f / %.1f (delegate %.1f)\n", sh.kind, sh.nets, mib(median), mib(peak), mib(sh.delegateRSS))
	}
}
