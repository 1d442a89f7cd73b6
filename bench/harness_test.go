package main

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The arms take turns at going first, every arm runs once per iteration,
// and what the warm-up iterations record is dropped; before runs once, just
// ahead of the first recorded iteration, and after at the end of each.
func TestTrialInterleaves(t *testing.T) {
	var order, events []string
	tr := trial{arms: []string{"a", "b", "c"}, warmup: 2, n: 3,
		before: func() error { events = append(events, "before"); return nil },
		after:  func(it int) error { events = append(events, "after"); return nil }}
	s, err := tr.run(func(it int, arm string, rec record) error {
		if len(order)%3 == 0 {
			events = append(events, "it")
		}
		order = append(order, arm)
		rec("", time.Duration(it)*time.Millisecond)
		rec("x", time.Duration(10*it)*time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a b c b c a c a b a b c b c a"); !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if want := strings.Fields("it after it after before it after it after it after"); !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	for _, arm := range tr.arms {
		if got := s[arm]; !slices.Equal(got, []float64{2, 3, 4}) {
			t.Errorf("%s: %v, want the recorded iterations 2, 3, 4 only", arm, got)
		}
		if got := s[key(arm, "x")]; !slices.Equal(got, []float64{20, 30, 40}) {
			t.Errorf("%s/x: %v, want 20, 30, 40", arm, got)
		}
	}
}

// An arm's error ends the trial with it, and so does a hook's.
func TestTrialStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	runs := 0
	_, err := trial{arms: []string{"a", "b"}, n: 5}.run(func(it int, arm string, rec record) error {
		runs++
		if it == 1 && arm == "b" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || runs != 3 {
		t.Errorf("err %v after %d runs, want boom after 3", err, runs)
	}
	_, err = trial{arms: []string{"a"}, n: 5, after: func(it int) error { return boom }}.run(func(int, string, record) error { return nil })
	if !errors.Is(err, boom) {
		t.Errorf("after's error: %v, want boom", err)
	}
}

func TestSummaries(t *testing.T) {
	d := summarizeMS([]float64{5, 1, 4, 2, 3, 100})
	if want := (dist{N: 6, P50: 3.5, P99: 100, Mean: 19.167, Min: 1, Max: 100}); d != want {
		t.Errorf("summarizeMS = %+v, want %+v", d, want)
	}
	if got := summarize([]time.Duration{time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}); got.P50 != 2 || got.N != 3 {
		t.Errorf("summarize = %+v, want p50 2 of 3", got)
	}
	if d := summarizeMS(nil); d != (dist{}) {
		t.Errorf("summarizeMS(nil) = %+v, want zero", d)
	}
	// Nearest rank: p99 of 200 values is the 198th.
	v := make([]float64, 200)
	for i := range v {
		v[i] = float64(i + 1)
	}
	if q := quantile(v, 0.99); q != 198 {
		t.Errorf("p99 of 1..200 = %v, want 198", q)
	}
	if !math.IsNaN(ratio(1, 0)) || ratio(2, 3) != 0.667 {
		t.Errorf("ratio(1, 0) = %v, ratio(2, 3) = %v; want NaN and 0.667", ratio(1, 0), ratio(2, 3))
	}
	if s := slopePer1000([]float64{1, 1.5, 2, 2.5}); s != 500 {
		t.Errorf("slope of 0.5 ms per step = %v per 1000, want 500", s)
	}
}

// The comparisons pair each arm's figure of an iteration with the
// reference's of the same iteration.
func TestComparisons(t *testing.T) {
	s := samples{"m": {110, 220, 330}, "ref": {100, 200, 300}, "x": {150, 100, 300}}
	if d := s.diff("m", "ref"); d.P50 != 20 || d.Min != 10 || d.Max != 30 {
		t.Errorf("diff = %+v, want 10, 20, 30", d)
	}
	if r := s.ratio("m", "ref"); r != 1.1 {
		t.Errorf("ratio of medians = %v, want 1.1", r)
	}
	// Ratios 1.5, 0.5, 1: the median of the per-iteration ratios is 1, the
	// ratio of the medians 0.75.
	if p, r := s.paired("x", "ref"), s.ratio("x", "ref"); p != 1 || r != 0.75 {
		t.Errorf("paired = %v, ratio = %v; want 1 and 0.75", p, r)
	}
	if m := s.mean("x"); math.Abs(m-550.0/3) > 1e-9 {
		t.Errorf("mean = %v, want 183.33…", m)
	}
	if s.opt("none") != nil || s.optRatio("none", "ref") != nil || s.opt("m") == nil || s.optRatio("m", "ref") != 1.1 {
		t.Errorf("opt and optRatio: %v %v %v %v; want nil, nil, a dist, 1.1", s.opt("none"), s.optRatio("none", "ref"), s.opt("m"), s.optRatio("m", "ref"))
	}
}

// An obj keeps its keys in order and leaves out nil ones.
func TestObjJSON(t *testing.T) {
	b, err := json.Marshal(obj{{"z", 1}, {"gone", nil}, {"a", obj{{"x", "y"}}}, {"zero", nonZero(0.0)}, {"list", []int{1}}})
	if err != nil || string(b) != `{"z":1,"a":{"x":"y"},"list":[1]}` {
		t.Errorf("obj JSON = %s, %v", b, err)
	}
	if b, _ := json.Marshal(obj{}); string(b) != `{}` {
		t.Errorf("empty obj = %s", b)
	}
}

// The report prints its parts in textOrder, whatever order they were
// written in.
func TestReportOrder(t *testing.T) {
	var r report
	for _, part := range []string{"runtime", "startup", "overhead", "header"} {
		r.out(part).Write([]byte(part + "\n"))
	}
	var out strings.Builder
	r.print(&out)
	if want := "header\noverhead\nstartup\nruntime\n"; out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// An arm's work may record from many goroutines at once (the concurrency
// section's pods): every figure is kept.
func TestTrialRecordsConcurrently(t *testing.T) {
	s, err := trial{arms: []string{"a", "b"}, n: 3}.run(func(it int, arm string, rec record) error {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { rec("ADD", time.Millisecond) })
		}
		wg.Wait()
		return nil
	})
	if err != nil || len(s["a/ADD"]) != 60 || len(s["b/ADD"]) != 60 {
		t.Errorf("%d and %d figures (%v), want 60 each", len(s["a/ADD"]), len(s["b/ADD"]), err)
	}
}
