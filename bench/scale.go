package main

import (
	"fmt"
	"sync"
)

// runScale creates -scale pods, then runs ADD and DEL for each in turn, each
// under its own container ID, so manifold sees as many distinct pods as
// cycles. Each cycle also runs the direct reference for the same pod, the two
// going first in turn, as a control for the machine's load: the ratio of
// manifold's median to the reference's in the first and the last window of
// cycles says whether manifold slows down as it handles more pods. The files
// left in manifold's cniDir and in the runtimes' caches are listed after.
func runScale(b *bench, s settings, r *report) error {
	cycles, kind, networks := s.scaleCycles, kindNoop, 3
	logf("scale: creating %d pods", cycles)
	pods := make([]*podSpec, cycles)
	errs := make([]error, cycles)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				pods[i], errs[i] = b.createPod(fmt.Sprintf("scale-%04d", i), kind, networks)
			}
		})
	}
	for i := 0; i < cycles && b.ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range append(errs, b.ctx.Err()) {
		if err != nil {
			return err
		}
	}
	netns, err := b.newNetNS()
	if err != nil {
		return err
	}
	logf("scale: %d ADD/DEL cycles", cycles)
	st, err := b.trial([]string{armManifold, armDirect}, 0, cycles).run(func(i int, arm string, rec record) error {
		a, d, err := b.addDel(arm, pods[i], netns.Path(), 0)
		if err != nil {
			return fmt.Errorf("cycle %d (%s): %w", i, arm, err)
		}
		rec("ADD", a.Wall)
		rec("DEL", d.Wall)
		if b.watch != nil && arm == armManifold {
			rec("ADD own", a.Own())
		}
		if arm == armDirect && (i+1)%250 == 0 {
			logf("scale: %d cycles done", i+1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w := min(100, max(1, cycles/10))
	win := func(k string, last bool) dist {
		if last {
			return summarizeMS(st[k][len(st[k])-w:])
		}
		return summarizeMS(st[k][:w])
	}
	add, del, ref, own := key(armManifold, "ADD"), key(armManifold, "DEL"), key(armDirect, "ADD"), key(armManifold, "ADD own")
	ratioFirst, ratioLast := ratio(win(add, false).P50, win(ref, false).P50), ratio(win(add, true).P50, win(ref, true).P50)
	var ownFirst, ownLast any
	if len(st[own]) == cycles {
		ownFirst, ownLast = win(own, false), win(own, true)
	}
	var left [3][]string
	for i, dir := range []string{b.cniDir, b.runtimeCache, b.directCache} {
		if left[i], err = listFiles(dir); err != nil {
			return err
		}
	}
	r.set("scale", obj{{"cycles", cycles}, {"delegates", kind}, {"networks", networks}, {"window", w},
		{"add", st.dist(add)}, {"del", st.dist(del)}, {"add_first", win(add, false)}, {"add_last", win(add, true)},
		{"add_growth_p50", ratio(win(add, true).P50, win(add, false).P50)}, {"del_first", win(del, false)}, {"del_last", win(del, true)},
		{"del_growth_p50", ratio(win(del, true).P50, win(del, false).P50)},
		{"add_slope_ms_per_1000", slopePer1000(st[add])}, {"del_slope_ms_per_1000", slopePer1000(st[del])},
		{"add_own_first", ownFirst}, {"add_own_last", ownLast},
		{"reference_add_first", win(ref, false)}, {"reference_add_last", win(ref, true)},
		{"add_ratio_first", ratioFirst}, {"add_ratio_last", ratioLast}, {"add_ratio_growth", ratio(ratioLast, ratioFirst)},
		{"leftover_files", left[0]}, {"runtime_leftover_files", left[1]}, {"reference_leftover_files", left[2]}})

	out := r.out("scale")
	fmt.Fprintf(out, "\nScale: %d sequential pods (%s, %d nets), ms p50 / p99\n", cycles, kind, networks)
	for _, v := range []string{add, del} {
		first, last := win(v, false), win(v, true)
		fmt.Fprintf(out, "  %s first %d %s, last %d %s, growth %.3f×, slope %+.2f ms per 1000 pods\n", v[len(armManifold)+1:], w, pp(first), w, pp(last),
			ratio(last.P50, first.P50), slopePer1000(st[v]))
	}
	fmt.Fprintf(out, "  direct reference ADD first %d %s, last %d %s; manifold/direct p50 first %.3f×, last %.3f×, growth %.3f×\n",
		w, pp(win(ref, false)), w, pp(win(ref, true)), ratioFirst, ratioLast, ratio(ratioLast, ratioFirst))
	if ownFirst != nil {
		fmt.Fprintf(out, "  manifold's own time per ADD: first %d %s, last %d %s\n", w, pp(win(own, false)), w, pp(win(own, true)))
	}
	fmt.Fprintf(out, "  files left in cniDir: %d, in the runtime's cache: %d\n", len(left[0]), len(left[1]))
	for i, f := range append(left[0], left[1]...) {
		if i == 10 {
			fmt.Fprintf(out, "    …\n")
			break
		}
		fmt.Fprintf(out, "    %s\n", f)
	}
	return nil
}
