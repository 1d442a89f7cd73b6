package main

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// concVerb compares one verb under concurrency.
type concVerb struct {
	Manifold  dist    `json:"manifold"`
	Reference dist    `json:"reference"`
	RatioP50  float64 `json:"ratio_p50"`
	RatioP99  float64 `json:"ratio_p99"`
	// Thick is thick mode (shim and daemon) in the same rounds.
	Thick         dist    `json:"thick"`
	ThickRatioP50 float64 `json:"thick_ratio_p50"`
	ThickRatioP99 float64 `json:"thick_ratio_p99"`
}

// concResult is pods started (and stopped) all at once, as after a node reboot
// or a rollout.
type concResult struct {
	Pods      int      `json:"pods"`
	Rounds    int      `json:"rounds"`
	Delegates string   `json:"delegates"`
	Networks  int      `json:"networks"`
	Add       concVerb `json:"add"`
	Del       concVerb `json:"del"`
	// RoundAdd is the wall time of a whole round of ADDs (first start to
	// last finish), per arm.
	RoundAddManifold  dist `json:"round_add_manifold"`
	RoundAddReference dist `json:"round_add_reference"`
	RoundAddThick     dist `json:"round_add_thick"`
}

// concurrency runs rounds of n simultaneous ADDs (then n simultaneous DELs),
// with manifold, the direct reference and thick mode taking turns by round.
func (b *bench) concurrency(n, rounds int, kind string, networks int) (*concResult, error) {
	pods := make([]*podSpec, n)
	netnss := make([]ns.NetNS, n)
	for i := range pods {
		var err error
		if pods[i], err = b.createPod(fmt.Sprintf("conc-%02d", i), kind, networks); err != nil {
			return nil, err
		}
		if netnss[i], err = b.newNetNS(); err != nil {
			return nil, err
		}
	}
	adds := map[string][]time.Duration{}
	dels := map[string][]time.Duration{}
	roundAdd := map[string][]time.Duration{}
	arms := []string{armManifold, armDirect, armThick}
	// Round -1 is a warm-up.
	for round := -1; round < rounds; round++ {
		for k := range arms {
			arm := arms[(k+round+1)%len(arms)]
			sbs := make([]*sandbox, n)
			for i := range sbs {
				sbs[i] = b.newSandbox(pods[i], netnss[i].Path())
			}
			start := time.Now()
			a, addErr := b.concurrent(sbs, func(sb *sandbox) (sample, error) { return b.add(b.ctx, arm, sb) })
			wall := time.Since(start)
			d, delErr := b.concurrent(sbs, func(sb *sandbox) (sample, error) { return b.del(b.ctx, arm, sb) })
			if err := errors.Join(addErr, delErr); err != nil {
				return nil, err
			}
			if b.watch != nil {
				b.watch.pruneRoot()
			}
			if round >= 0 {
				adds[arm] = append(adds[arm], a...)
				dels[arm] = append(dels[arm], d...)
				roundAdd[arm] = append(roundAdd[arm], wall)
			}
		}
	}
	r := &concResult{Pods: n, Rounds: rounds, Delegates: kind, Networks: networks,
		RoundAddManifold:  summarize(roundAdd[armManifold]),
		RoundAddReference: summarize(roundAdd[armDirect]),
		RoundAddThick:     summarize(roundAdd[armThick]),
	}
	for _, v := range []struct {
		out *concVerb
		in  map[string][]time.Duration
	}{{&r.Add, adds}, {&r.Del, dels}} {
		v.out.Manifold, v.out.Reference = summarize(v.in[armManifold]), summarize(v.in[armDirect])
		v.out.RatioP50 = ratio(v.out.Manifold.P50, v.out.Reference.P50)
		v.out.RatioP99 = ratio(v.out.Manifold.P99, v.out.Reference.P99)
		v.out.Thick = summarize(v.in[armThick])
		v.out.ThickRatioP50 = ratio(v.out.Thick.P50, v.out.Reference.P50)
		v.out.ThickRatioP99 = ratio(v.out.Thick.P99, v.out.Reference.P99)
	}
	return r, nil
}

// concurrent runs f for every sandbox at once (released together) and returns
// their wall times.
func (b *bench) concurrent(sbs []*sandbox, f func(*sandbox) (sample, error)) ([]time.Duration, error) {
	out := make([]time.Duration, len(sbs))
	errs := make([]error, len(sbs))
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			s, err := f(sb)
			out[i], errs[i] = s.Wall, err
		}()
	}
	close(release)
	wg.Wait()
	return out, errors.Join(errs...)
}
