package main

import (
	"os"
	"path/filepath"
	"time"
)

// startupResult compares a bare start of manifold with that of a minimal CNI
// plugin: VERSION does nothing but answer, so its wall time is process start,
// package initialisation and exit.
type startupResult struct {
	Iterations int  `json:"iterations"`
	Manifold   dist `json:"manifold_version"`
	Noop       dist `json:"noop_version"`
	// Baseline is the -baseline binary's VERSION, interleaved likewise.
	Baseline *dist `json:"baseline_version,omitempty"`
	// Overhead is the per-iteration difference, manifold minus noop.
	Overhead        dist    `json:"overhead"`
	RatioP50        float64 `json:"ratio_p50"`
	ManifoldRSSKiB  int64   `json:"manifold_version_peak_rss_kib"`
	NoopRSSKiB      int64   `json:"noop_version_peak_rss_kib"`
	ManifoldSizeKiB int64   `json:"manifold_binary_kib"`
	NoopSizeKiB     int64   `json:"noop_binary_kib"`
}

// startup runs VERSION of manifold and of noop, alternating which goes first.
func (b *bench) startup(iterations, warmup int) (*startupResult, error) {
	bins := []string{b.manifold, filepath.Join(b.plugins, "noop")}
	if b.baseline != "" {
		bins = append(bins, b.baseline)
	}
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	walls := make([][]time.Duration, len(bins))
	for it := -warmup; it < iterations; it++ {
		if err := b.ctx.Err(); err != nil {
			return nil, err
		}
		for k := range bins {
			i := (k + it + warmup) % len(bins)
			rec := &recorder{}
			if _, err := (&benchExec{}).ExecPlugin(withRecorder(b.ctx, rec), bins[i], stdin, env); err != nil {
				return nil, err
			}
			if it >= 0 {
				walls[i] = append(walls[i], rec.procs[0].Wall)
			}
		}
	}
	diff := make([]time.Duration, iterations)
	for i := range diff {
		diff[i] = walls[0][i] - walls[1][i]
	}
	r := &startupResult{
		Iterations: iterations,
		Manifold:   summarize(walls[0]),
		Noop:       summarize(walls[1]),
		Overhead:   summarize(diff),
	}
	r.RatioP50 = ratio(r.Manifold.P50, r.Noop.P50)
	if len(bins) > 2 {
		base := summarize(walls[2])
		r.Baseline = &base
	}
	// Peak RSS through the shim (see bench/shim for why not directly).
	for i := 0; i < 10; i++ {
		for _, name := range []string{"manifold", "noop"} {
			if _, err := (&benchExec{}).ExecPlugin(b.ctx, filepath.Join(b.shimDir, name), stdin, env); err != nil {
				return nil, err
			}
		}
	}
	if b.watch != nil {
		b.watch.pruneRoot()
	}
	lines, err := b.takeShimLog()
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		if l.Plugin == "manifold" {
			r.ManifoldRSSKiB = max(r.ManifoldRSSKiB, l.MaxRSSKiB)
		} else {
			r.NoopRSSKiB = max(r.NoopRSSKiB, l.MaxRSSKiB)
		}
	}
	if fi, err := os.Stat(bins[0]); err == nil {
		r.ManifoldSizeKiB = fi.Size() / 1024
	}
	if fi, err := os.Stat(bins[1]); err == nil {
		r.NoopSizeKiB = fi.Size() / 1024
	}
	return r, nil
}
