package main

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// runConcurrency runs rounds of -conc simultaneous ADDs (then as many
// simultaneous DELs) of real-delegate 3-network pods, as after a node reboot
// or a rollout, with manifold, the direct reference and thick mode taking
// turns by round, after one warm-up round.
func runConcurrency(b *bench, s settings, r *report) error {
	n, rounds, kind, networks := s.concPods, s.concRounds, kindReal, 3
	logf("concurrency: %d pods at once, %d rounds per arm", n, rounds)
	pods := make([]*podSpec, n)
	netnss := make([]ns.NetNS, n)
	for i := range pods {
		var err error
		if pods[i], err = b.createPod(fmt.Sprintf("conc-%02d", i), kind, networks); err != nil {
			return err
		}
		if netnss[i], err = b.newNetNS(); err != nil {
			return err
		}
	}
	st, err := b.trial([]string{armManifold, armDirect, armThick}, 1, rounds).run(func(_ int, arm string, rec record) error {
		sbs := make([]*sandbox, n)
		for i := range sbs {
			sbs[i] = b.newSandbox(pods[i], netnss[i].Path())
		}
		start := time.Now()
		addErr := concurrent(sbs, func(sb *sandbox) error { s, err := b.call(b.ctx, arm, "ADD", sb); rec("ADD", s.Wall); return err })
		rec("round", time.Since(start))
		delErr := concurrent(sbs, func(sb *sandbox) error { s, err := b.call(b.ctx, arm, "DEL", sb); rec("DEL", s.Wall); return err })
		return errors.Join(addErr, delErr)
	})
	if err != nil {
		return err
	}
	verb := func(v string) obj {
		m, ref, thick := key(armManifold, v), key(armDirect, v), key(armThick, v)
		return obj{{"manifold", st.dist(m)}, {"reference", st.dist(ref)}, {"ratio_p50", st.ratio(m, ref)},
			{"ratio_p99", ratio(st.dist(m).P99, st.dist(ref).P99)}, {"thick", st.dist(thick)},
			{"thick_ratio_p50", st.ratio(thick, ref)}, {"thick_ratio_p99", ratio(st.dist(thick).P99, st.dist(ref).P99)}}
	}
	r.set("concurrency", obj{{"pods", n}, {"rounds", rounds}, {"delegates", kind}, {"networks", networks},
		{"add", verb("ADD")}, {"del", verb("DEL")}, {"round_add_manifold", st.dist(key(armManifold, "round"))},
		{"round_add_reference", st.dist(key(armDirect, "round"))}, {"round_add_thick", st.dist(key(armThick, "round"))}})
	w := r.out("concurrency")
	fmt.Fprintf(w, "\nConcurrency: %d pods at once (%s, %d nets), %d rounds, ms p50 / p99\n", n, kind, networks, rounds)
	for _, v := range []string{"ADD", "DEL"} {
		m, ref := st.dist(key(armManifold, v)), st.dist(key(armDirect, v))
		fmt.Fprintf(w, "  %s manifold %s, direct %s, ratio p50 %.3f×, p99 %.3f×\n", v, pp(m), pp(ref), ratio(m.P50, ref.P50), ratio(m.P99, ref.P99))
	}
	for _, v := range []string{"ADD", "DEL"} {
		t, ref := st.dist(key(armThick, v)), st.dist(key(armDirect, v))
		fmt.Fprintf(w, "  %s thick %s, ratio p50 %.3f×, p99 %.3f×\n", v, pp(t), ratio(t.P50, ref.P50), ratio(t.P99, ref.P99))
	}
	fmt.Fprintf(w, "  whole round of ADDs: manifold %.0f ms, direct %.0f ms, thick %.0f ms (p50)\n", st.dist(key(armManifold, "round")).P50,
		st.dist(key(armDirect, "round")).P50, st.dist(key(armThick, "round")).P50)
	return nil
}

// concurrent runs f for every sandbox at once (released together).
func concurrent(sbs []*sandbox, f func(*sandbox) error) error {
	errs := make([]error, len(sbs))
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Go(func() {
			<-release
			errs[i] = f(sb)
		})
	}
	close(release)
	wg.Wait()
	return errors.Join(errs...)
}
