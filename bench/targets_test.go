package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The targets are read from the real 3- and 8-network shapes: each figure is
// the ratio its target names, and met says whether it is within the limit.
func TestTargets(t *testing.T) {
	mk := func(n int, thick, conc, thin, ref, base []float64) *shape {
		vals := map[string][]float64{armManifold: thin, armDirect: ref, armThick: thick, armThickConcurrent: conc}
		if base != nil {
			vals[armBaseline] = base
		}
		sh := testShape(kindReal, n, vals)
		sh.cpu[armThick] = 7.5
		return sh
	}
	three := mk(3, []float64{90, 94, 98}, []float64{80, 84, 88}, []float64{100, 102, 104}, []float64{100, 100, 100}, []float64{104, 105, 106})
	eight := mk(8, []float64{180}, []float64{150}, []float64{210}, []float64{200}, nil)
	got := map[string]target{}
	for _, tg := range targets([]*shape{three, eight}) {
		got[tg.What] = tg
	}
	want := map[string]struct {
		value float64
		met   bool
	}{
		"daemon ADD, real 3 nets, ≤ 0.98× direct":                            {0.94, true},
		"daemon DEL, real 3 nets, ≤ 1.03× direct":                            {0.94, true},
		"daemon DEL below thin DEL, real 3 nets":                             {0.922, true},
		"daemon CPU per ADD+DEL, real 3 nets, ≤ 8 ms":                        {7.5, true},
		"thin DEL, real 3 nets, ≤ 1.03× direct":                              {1.02, true},
		"thin ADD, real 3 nets, no slower than before (-baseline)":           {0.971, true},
		"daemon ADD with concurrentAttachments, real 3 nets, ≤ 0.90× direct": {0.84, true},
		"the same, real 8 nets, lower than for 3":                            {0.75, true},
	}
	if len(got) != len(want) {
		t.Errorf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for what, w := range want {
		tg, ok := got[what]
		if !ok || tg.Met == nil || *tg.Met != w.met || tg.Value < w.value-1e-6 || tg.Value > w.value+1e-6 {
			t.Errorf("%s: %+v, want value %.4f met %v", what, tg, w.value, w.met)
		}
	}

	// Over a limit is not met, and a DEL as slow as thin's is not below it;
	// without a baseline arm, the thin ADD target cannot be judged.
	slow := mk(3, []float64{99}, []float64{90}, []float64{99}, []float64{100}, nil)
	slow.cpu[armThick] = 12.25
	var out strings.Builder
	printTargets(&out, []*shape{slow}, nil)
	rows := map[string][]string{
		"daemon ADD, real 3 nets, ≤ 0.98× direct":      {"0.990×", "0.980×", "NO"},
		"daemon DEL below thin DEL, real 3 nets":       {"1.000×", "1.000×", "NO"},
		"daemon CPU per ADD+DEL, real 3 nets, ≤ 8 ms":  {"12.2 ms", "8.0 ms", "NO"},
		"thin ADD, real 3 nets, no slower than before": {"n/a"},
	}
	for name, cells := range rows {
		var line string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, name) {
				line = l
			}
		}
		f := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(line, name), " ms", "_ms"))
		if len(f) < len(cells) || strings.Join(f[len(f)-len(cells):], " ") != strings.ReplaceAll(strings.Join(cells, " "), " ms", "_ms") {
			t.Errorf("targets table: row %q is %q, want it to end in %q:\n%s", name, line, cells, out.String())
		}
	}
}

// The targets table names a machine whose process starts do not overlap, and
// only such a machine.
func TestTargetsNameSerialProcessStarts(t *testing.T) {
	sh := testShape(kindReal, 3, map[string][]float64{armManifold: {110}, armDirect: {100}, armThick: {104}})
	for _, tc := range []struct {
		speedup float64
		named   bool
	}{{0.91, true}, {1.24, true}, {1.25, false}, {1.9, false}} {
		var out strings.Builder
		starts := &processStarts{Streams: 2, Speedup: tc.speedup}
		printTargets(&out, []*shape{sh}, starts)
		if got := strings.Contains(out.String(), "need that overlap"); got != tc.named {
			t.Errorf("speedup %.2f: the table names the machine: %v, want %v:\n%s", tc.speedup, got, tc.named, out.String())
		}
		if got := strings.Contains(starts.summary(), "gains little here"); got != tc.named {
			t.Errorf("speedup %.2f: the summary says overlap gains little: %v, want %v: %s", tc.speedup, got, tc.named, starts.summary())
		}
	}
}

// The probe measures real process starts: each half makes its starts, and
// both the per-start figures and the speedup come from them.
func TestProbeProcessStarts(t *testing.T) {
	bin, err := exec.LookPath("true")
	if err != nil {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("no true binary, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping")
		}
		t.Skip("no true binary")
	}
	p, err := probeProcessStarts(context.Background(), bin, 7)
	if err != nil {
		t.Fatal(err)
	}
	if p.Streams < 2 || p.Starts%p.Streams != 0 || p.Starts < p.Streams || p.SerialMs <= 0 || p.Speedup <= 0 || p.MinorFaults <= 0 {
		t.Errorf("probe %+v: want starts a multiple of the streams (≥ 2) and positive times, faults and speedup", p)
	}
	if _, err := probeProcessStarts(context.Background(), "/nonexistent/noop", 4); err == nil || !strings.Contains(err.Error(), "/nonexistent/noop") {
		t.Errorf("probe of a missing binary: %v, want an error naming it", err)
	}
}
