package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// target is one of the overhead targets of docs/performance.md (issue 29),
// as this run measured it.
type target struct {
	What   string  `json:"target"`
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	// Unit is what Value and Limit count: "×" (a ratio) or "ms".
	Unit string `json:"unit"`
	// Below: the value must be under the limit, not just at most it.
	Below bool `json:"below,omitempty"`
	// Met is nil when the run lacks an arm the target needs.
	Met *bool `json:"met,omitempty"`
}

// targets checks the overhead section's results against the targets, from
// the real-delegate shapes of this run: thick (daemon) ADD and DEL, thin DEL
// and, with -baseline, thin ADD against the baseline's, the thick ADD with
// concurrentAttachments for 3 and 8 networks, and the daemon's CPU per ADD
// and DEL (issue 38).
func targets(shapes []*overheadResult) []target {
	find := func(n int) *overheadResult {
		for _, o := range shapes {
			if o.Delegates == kindReal && o.Networks == n {
				return o
			}
		}
		return nil
	}
	var out []target
	add := func(t target, ok bool) {
		if t.Unit == "" {
			t.Unit = "×"
		}
		if ok {
			met := t.Value <= t.Limit && !(t.Below && t.Value == t.Limit)
			t.Met = &met
		}
		out = append(out, t)
	}
	check := func(what, figure string, value, limit float64, ok bool) {
		add(target{What: what, Figure: figure, Value: value, Limit: limit}, ok)
	}
	if o := find(3); o != nil && o.Add.Thick != nil {
		check("daemon ADD, real 3 nets, ≤ 0.98× direct", "thick/direct p50", o.Add.ThickRatioP50, 0.98, true)
		check("daemon DEL, real 3 nets, ≤ 1.03× direct", "thick/direct p50", o.Del.ThickRatioP50, 1.03, true)
		add(target{What: "daemon DEL below thin DEL, real 3 nets", Figure: "thick/thin p50", Value: ratio(o.Del.Thick.P50, o.Del.Manifold.P50), Limit: 1, Below: true}, true)
		if o.DaemonCPUPerAddDel > 0 {
			add(target{What: "daemon CPU per ADD+DEL, real 3 nets, ≤ 8 ms", Figure: "daemon CPU, mean", Value: o.DaemonCPUPerAddDel, Limit: 8, Unit: "ms"}, true)
		}
		check("thin DEL, real 3 nets, ≤ 1.03× direct", "thin/direct p50", o.Del.RatioP50, 1.03, true)
		if o.Add.Baseline != nil {
			check("thin ADD, real 3 nets, no slower than before (-baseline)", "thin/baseline p50", ratio(o.Add.Manifold.P50, o.Add.Baseline.P50), 1, true)
		} else {
			check("thin ADD, real 3 nets, no slower than before: needs an old revision's arm (make bench-compare)", "thin/direct p50", o.Add.RatioP50, 0, false)
		}
		if o.Add.ThickConcurrent != nil {
			check("daemon ADD with concurrentAttachments, real 3 nets, ≤ 0.90× direct", "concurrent/direct p50", o.Add.ThickConcurrentRatioP50, 0.90, true)
			if o8 := find(8); o8 != nil && o8.Add.ThickConcurrent != nil {
				check("the same, real 8 nets, lower than for 3", "concurrent/direct p50", o8.Add.ThickConcurrentRatioP50, o.Add.ThickConcurrentRatioP50, true)
			}
		}
	}
	return out
}

// printTargets writes the targets table, when the run has the shapes.
// A machine whose process-start probe found no parallelism is named under
// it: the targets below 1× need overlapping process starts.
func printTargets(w io.Writer, shapes []*overheadResult, starts *processStarts) {
	ts := targets(shapes)
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTargets (docs/performance.md), from the iterations above\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tfigure\tvalue\tlimit\tmet")
	for _, t := range ts {
		met := "n/a"
		if t.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*t.Met]
		}
		if t.Unit == "×" {
			fmt.Fprintf(tw, "%s\t%s\t%.3f×\t%.3f×\t%s\n", t.What, t.Figure, t.Value, t.Limit, met)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%.1f %s\t%.1f %s\t%s\n", t.What, t.Figure, t.Value, t.Unit, t.Limit, t.Unit, met)
		}
	}
	tw.Flush()
	for _, o := range shapes {
		if o.Delegates == kindReal && o.Networks == 3 && o.FloorCPUPerAddDel > 0 {
			fmt.Fprintf(w, "The floor for the daemon's CPU: a Go process that runs the same delegates through libcni and does nothing else used %.1f ms per ADD+DEL in the same iterations (bench/floor).\n", o.FloorCPUPerAddDel)
		}
	}
	if starts != nil && starts.Speedup < overlapHelps {
		fmt.Fprintf(w, "On this machine %d process starts at once ran %.2f× as fast as one after the other (at best %d×): the targets below 1× direct need that overlap (docs/performance-history.md, change 17).\n", starts.Streams, starts.Speedup, starts.Streams)
	}
}
