package main

import (
	"fmt"
	"io"
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

// targets checks the overhead section's figures against the targets, from
// the real-delegate shapes of this run: thick (daemon) ADD and DEL, thin DEL
// and, with -baseline, thin ADD against the baseline's, the thick ADD with
// concurrentAttachments for 3 and 8 networks, and the daemon's CPU per ADD
// and DEL (issue 38).
func targets(shapes []*shape) []target {
	find := func(n int) *shape {
		for _, sh := range shapes {
			if sh.kind == kindReal && sh.nets == n {
				return sh
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
	o := find(3)
	if o == nil || len(o.s[k(armThick, "ADD")]) == 0 {
		return nil
	}
	s := o.s
	thickAdd := s.ratio(k(armThick, "ADD"), k(armDirect, "ADD"))
	check("daemon ADD, real 3 nets, ≤ 0.98× direct", "thick/direct p50", thickAdd, 0.98, true)
	check("daemon DEL, real 3 nets, ≤ 1.03× direct", "thick/direct p50", s.ratio(k(armThick, "DEL"), k(armDirect, "DEL")), 1.03, true)
	add(target{What: "daemon DEL below thin DEL, real 3 nets", Figure: "thick/thin p50", Value: s.ratio(k(armThick, "DEL"), k(armManifold, "DEL")), Limit: 1, Below: true}, true)
	if cpu := o.cpu[armThick]; cpu > 0 {
		add(target{What: "daemon CPU per ADD+DEL, real 3 nets, ≤ 8 ms", Figure: "daemon CPU, mean", Value: cpu, Limit: 8, Unit: "ms"}, true)
	}
	check("thin DEL, real 3 nets, ≤ 1.03× direct", "thin/direct p50", s.ratio(k(armManifold, "DEL"), k(armDirect, "DEL")), 1.03, true)
	if len(s[k(armBaseline, "ADD")]) > 0 {
		check("thin ADD, real 3 nets, no slower than before (-baseline)", "thin/baseline p50", s.ratio(k(armManifold, "ADD"), k(armBaseline, "ADD")), 1, true)
	} else {
		check("thin ADD, real 3 nets, no slower than before: needs an old revision's arm (make bench-compare)", "thin/direct p50", s.ratio(k(armManifold, "ADD"), k(armDirect, "ADD")), 0, false)
	}
	if len(s[k(armThickConcurrent, "ADD")]) > 0 {
		conc := s.ratio(k(armThickConcurrent, "ADD"), k(armDirect, "ADD"))
		check("daemon ADD with concurrentAttachments, real 3 nets, ≤ 0.90× direct", "concurrent/direct p50", conc, 0.90, true)
		if o8 := find(8); o8 != nil && len(o8.s[k(armThickConcurrent, "ADD")]) > 0 {
			check("the same, real 8 nets, lower than for 3", "concurrent/direct p50", o8.s.ratio(k(armThickConcurrent, "ADD"), k(armDirect, "ADD")), conc, true)
		}
	}
	return out
}

// printTargets writes the targets table, when the run has the shapes.
// A machine whose process-start probe found no parallelism is named under
// it: the targets below 1× need overlapping process starts.
func printTargets(w io.Writer, shapes []*shape, starts *processStarts) {
	ts := targets(shapes)
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTargets (docs/performance.md), from the iterations above\n")
	var rows []string
	for _, t := range ts {
		met := "n/a"
		if t.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*t.Met]
		}
		if t.Unit == "×" {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%.3f×\t%.3f×\t%s", t.What, t.Figure, t.Value, t.Limit, met))
		} else {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%.1f %s\t%.1f %s\t%s", t.What, t.Figure, t.Value, t.Unit, t.Limit, t.Unit, met))
		}
	}
	table(w, false, "target\tfigure\tvalue\tlimit\tmet", rows)
	for _, sh := range shapes {
		if sh.kind == kindReal && sh.nets == 3 && sh.cpu[armFloor] > 0 {
			fmt.Fprintf(w, "The floor for the daemon's CPU: a Go process that runs the same delegates through libcni and does nothing else used %.1f ms per ADD+DEL in the same iterations (bench/floor).\n", sh.cpu[armFloor])
		}
	}
	if starts != nil && starts.Speedup < overlapHelps {
		fmt.Fprintf(w, "On this machine %d process starts at once ran %.2f× as fast as one after the other (at best %d×): the targets below 1× direct need that overlap (docs/performance-history.md, change 17).\n", starts.Streams, starts.Speedup, starts.Streams)
	}
}
