package main

// The harness under every section. A trial runs a section's arms in turn,
// the first arm rotating by one each iteration so that a noisy moment hits
// all alike, drops the warm-up iterations and keeps each arm's figures. The
// figures are summarised (dist), compared (ratios of medians, per-iteration
// differences and ratios) and reported here: as JSON (obj, in report.doc)
// and as text (report.out). A section supplies its set-up and one arm's
// work per iteration.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// trial is an interleaved measurement: warmup+n iterations, each of which
// runs every arm once.
type trial struct {
	ctx       context.Context
	arms      []string
	warmup, n int
	// before runs ahead of the first recorded iteration, and after at the
	// end of every iteration (warm-up ones too); either may be nil.
	before func() error
	after  func(it int) error
}

// record keeps a figure of the arm being run, under key(arm, name). An
// arm's work may record from several goroutines at once.
type record func(name string, d time.Duration)

// run runs the trial. each(it, arm, rec) is one arm's work in iteration it
// (0-based, the warm-up counted); what it records in a warm-up iteration is
// dropped.
func (t trial) run(each func(it int, arm string, rec record) error) (samples, error) {
	s := samples{}
	var mu sync.Mutex
	for it := 0; it < t.warmup+t.n; it++ {
		if t.ctx != nil && t.ctx.Err() != nil {
			return nil, t.ctx.Err()
		}
		if it == t.warmup && t.before != nil {
			if err := t.before(); err != nil {
				return nil, err
			}
		}
		for k := range t.arms {
			arm := t.arms[(it+k)%len(t.arms)]
			rec := func(name string, d time.Duration) {
				if it >= t.warmup {
					mu.Lock()
					s.add(key(arm, name), d)
					mu.Unlock()
				}
			}
			if err := each(it, arm, rec); err != nil {
				return nil, err
			}
		}
		if t.after != nil {
			if err := t.after(it); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// key names an arm's figure: the arm alone for its main one (name "").
func key(arm, name string) string {
	if name == "" {
		return arm
	}
	return arm + "/" + name
}

// samples are a trial's figures in ms, by key, in the order recorded.
type samples map[string][]float64

func (s samples) add(k string, d time.Duration) { s[k] = append(s[k], ms(d)) }

func (s samples) dist(k string) dist { return summarizeMS(s[k]) }

// opt is dist(k), or nil (left out of the JSON) when there is none.
func (s samples) opt(k string) any {
	if len(s[k]) == 0 {
		return nil
	}
	return s.dist(k)
}

// ratio is k's median over ref's.
func (s samples) ratio(k, ref string) float64 { return ratio(s.dist(k).P50, s.dist(ref).P50) }

// optRatio is ratio(k, ref), or nil when k has no figures.
func (s samples) optRatio(k, ref string) any {
	if len(s[k]) == 0 {
		return nil
	}
	return s.ratio(k, ref)
}

// diff summarises the per-iteration differences k minus ref.
func (s samples) diff(k, ref string) dist {
	a, b := s[k], s[ref]
	d := make([]float64, min(len(a), len(b)))
	for i := range d {
		d[i] = a[i] - b[i]
	}
	return summarizeMS(d)
}

// paired is the median of the per-iteration ratios k over ref, which the
// load of the moment moves less than the ratio of the medians.
func (s samples) paired(k, ref string) float64 {
	a, b := s[k], s[ref]
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = ratio(a[i], b[i])
	}
	slices.Sort(r)
	return round3(median(r))
}

// mean is the unrounded mean of k's figures.
func (s samples) mean(k string) float64 {
	var sum float64
	for _, v := range s[k] {
		sum += v
	}
	return sum / float64(max(len(s[k]), 1))
}

// dist summarises a set of durations, in milliseconds.
type dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Min  float64 `json:"min_ms"`
	Max  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the nearest-rank quantile of sorted values: with n samples, p99
// is the value that at least 99% of them do not exceed (the largest when n is
// below 100).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// median is the middle value (the mean of the two middle ones for even n).
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func summarize(ds []time.Duration) dist {
	s := samples{}
	for _, d := range ds {
		s.add("", d)
	}
	return s.dist("")
}

func summarizeMS(v []float64) dist {
	if len(v) == 0 {
		return dist{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return dist{N: len(s), P50: round3(median(s)), P99: round3(quantile(s, 0.99)),
		Mean: round3(sum / float64(len(s))), Min: round3(s[0]), Max: round3(s[len(s)-1])}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return math.Round(a/b*1000) / 1000
}

// slopePer1000 fits y = a + b*i by least squares over the figures' index
// and returns b per 1000 steps, rounded to µs.
func slopePer1000(y []float64) float64 {
	n := float64(len(y))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i, v := range y {
		x := float64(i)
		sx, sy, sxx, sxy = sx+x, sy+v, sxx+x*x, sxy+x*v
	}
	return math.Round((n*sxy-sx*sy)/(n*sxx-sx*sx)*1000*1000) / 1000
}

func pp(d dist) string { return fmt.Sprintf("%.1f / %.1f", d.P50, d.P99) }

func mib(kib int64) float64 { return float64(kib) / 1024 }

// obj is a JSON object that keeps its keys in order and leaves out the ones
// whose value is nil.
type obj []field

type field struct {
	k string
	v any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, f := range o {
		if f.v == nil {
			continue
		}
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.k, err)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", f.k, v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// nonZero is v, or nil (left out) when it is 0.
func nonZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// report is what one run measured: the JSON document, and the text of each
// part of the report, which prints the parts in textOrder.
type report struct {
	doc  obj
	text map[string]*bytes.Buffer
}

// textOrder is the report's parts in print order.
var textOrder = []string{"header", "overhead", "fresh", "api", "startup", "rss", "concurrency", "scale", "hotplug",
	"updates", "devices", "dra", "webhook", "cluster", "runtime"}

func (r *report) set(k string, v any) { r.doc = append(r.doc, field{k, v}) }

// out is the text of part of the report, to write to.
func (r *report) out(part string) io.Writer {
	if r.text == nil {
		r.text = map[string]*bytes.Buffer{}
	}
	if r.text[part] == nil {
		r.text[part] = &bytes.Buffer{}
	}
	return r.text[part]
}

func (r *report) print(w io.Writer) {
	for _, part := range textOrder {
		if t := r.text[part]; t != nil {
			_, _ = w.Write(t.Bytes())
		}
	}
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r.doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// table writes rows of tab-separated cells under header, two spaces apart,
// aligned right (or left).
func table(w io.Writer, right bool, header string, rows []string) {
	flags := uint(0)
	if right {
		flags = tabwriter.AlignRight
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
}
