package main

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// scaleResult is many sequential pods through one node's manifold.
type scaleResult struct {
	Cycles    int    `json:"cycles"`
	Delegates string `json:"delegates"`
	Networks  int    `json:"networks"`
	Window    int    `json:"window"`
	Add       dist   `json:"add"`
	Del       dist   `json:"del"`
	// AddFirst and AddLast are the first and last Window ADDs; AddGrowth is
	// the ratio of their medians.
	AddFirst  dist    `json:"add_first"`
	AddLast   dist    `json:"add_last"`
	AddGrowth float64 `json:"add_growth_p50"`
	DelFirst  dist    `json:"del_first"`
	DelLast   dist    `json:"del_last"`
	DelGrowth float64 `json:"del_growth_p50"`
	// AddSlope and DelSlope are least-squares slopes of time against cycle
	// index, in milliseconds per 1000 cycles.
	AddSlope float64 `json:"add_slope_ms_per_1000"`
	DelSlope float64 `json:"del_slope_ms_per_1000"`
	// AddOwnFirst and AddOwnLast are manifold's own time in the first and
	// last Window ADDs (kernel process events), free of the delegates' noise.
	AddOwnFirst *dist `json:"add_own_first,omitempty"`
	AddOwnLast  *dist `json:"add_own_last,omitempty"`
	// Every cycle also runs the direct reference (the same delegates with no
	// manifold), back to back, as a control for the machine's load: RatioFirst
	// and RatioLast are manifold's median over the reference's in the first
	// and last Window cycles, and RatioGrowth their quotient. On a shared
	// machine this is the figure that says whether manifold slows down as it
	// handles more pods.
	RefAddFirst dist    `json:"reference_add_first"`
	RefAddLast  dist    `json:"reference_add_last"`
	RatioFirst  float64 `json:"add_ratio_first"`
	RatioLast   float64 `json:"add_ratio_last"`
	RatioGrowth float64 `json:"add_ratio_growth"`
	// Leftovers are the files left in manifold's cniDir (records, lock files,
	// libcni cache entries) and in the runtime's cache after the last DEL.
	Leftovers        []string `json:"leftover_files"`
	RuntimeLeftovers []string `json:"runtime_leftover_files"`
	// ReferenceLeftovers is the reference runtime's cache, for comparison.
	ReferenceLeftovers []string `json:"reference_leftover_files"`
}

// scale creates cycles pods, then runs ADD and DEL for each in turn, each under
// its own container ID, so manifold sees as many distinct pods as cycles. Each
// cycle also runs the direct reference for the same pod, alternating which
// goes first.
func (b *bench) scale(cycles int, kind string, networks int) (*scaleResult, error) {
	logf("scale: creating %d pods", cycles)
	pods := make([]*podSpec, cycles)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p, err := b.createPod(fmt.Sprintf("scale-%04d", i), kind, networks)
				mu.Lock()
				pods[i] = p
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < cycles && b.ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := b.ctx.Err(); err != nil {
		return nil, err
	}
	netns, err := b.newNetNS()
	if err != nil {
		return nil, err
	}

	logf("scale: %d ADD/DEL cycles", cycles)
	adds := make([]time.Duration, 0, cycles)
	dels := make([]time.Duration, 0, cycles)
	refs := make([]time.Duration, 0, cycles)
	var owns []time.Duration
	for i, p := range pods {
		if err := b.ctx.Err(); err != nil {
			return nil, err
		}
		var a, d, ra sample
		for k := 0; k < 2; k++ {
			if (i+k)%2 == 0 {
				if a, d, err = b.addDel(armManifold, p, netns.Path(), 0); err != nil {
					return nil, fmt.Errorf("cycle %d: %w", i, err)
				}
			} else if ra, _, err = b.addDel(armDirect, p, netns.Path(), 0); err != nil {
				return nil, fmt.Errorf("cycle %d (reference): %w", i, err)
			}
		}
		if b.watch != nil && i%50 == 49 {
			b.watch.pruneRoot()
		}
		refs = append(refs, ra.Wall)
		adds = append(adds, a.Wall)
		dels = append(dels, d.Wall)
		if b.watch != nil {
			owns = append(owns, a.Own())
		}
		if (i+1)%250 == 0 {
			logf("scale: %d cycles done", i+1)
		}
	}

	w := min(100, max(1, cycles/10))
	r := &scaleResult{
		Cycles: cycles, Delegates: kind, Networks: networks, Window: w,
		Add: summarize(adds), Del: summarize(dels),
		AddFirst: summarize(adds[:w]), AddLast: summarize(adds[len(adds)-w:]),
		DelFirst: summarize(dels[:w]), DelLast: summarize(dels[len(dels)-w:]),
		AddSlope: slopePer1000(adds), DelSlope: slopePer1000(dels),
	}
	r.AddGrowth = ratio(r.AddLast.P50, r.AddFirst.P50)
	r.RefAddFirst, r.RefAddLast = summarize(refs[:w]), summarize(refs[len(refs)-w:])
	r.RatioFirst = ratio(r.AddFirst.P50, r.RefAddFirst.P50)
	r.RatioLast = ratio(r.AddLast.P50, r.RefAddLast.P50)
	r.RatioGrowth = ratio(r.RatioLast, r.RatioFirst)
	if len(owns) == len(adds) {
		first, last := summarize(owns[:w]), summarize(owns[len(owns)-w:])
		r.AddOwnFirst, r.AddOwnLast = &first, &last
	}
	r.DelGrowth = ratio(r.DelLast.P50, r.DelFirst.P50)
	if r.Leftovers, err = listFiles(b.cniDir); err != nil {
		return nil, err
	}
	if r.RuntimeLeftovers, err = listFiles(b.runtimeCache); err != nil {
		return nil, err
	}
	if r.ReferenceLeftovers, err = listFiles(b.directCache); err != nil {
		return nil, err
	}
	return r, nil
}

func slopePer1000(ds []time.Duration) float64 {
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = ms(d)
	}
	return math.Round(slope(v)*1000*1000) / 1000
}
