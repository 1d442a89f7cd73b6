package main

import (
	"strings"
	"testing"
	"time"
)

func msList(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

// The thick baseline arm is summarised against the same reference as the
// thick arm, and reported only when the run had one.
func TestThickBaselineReport(t *testing.T) {
	v := verbSamples{
		manifold: msList(150, 160, 170), reference: msList(100, 100, 100), overhead: msList(50, 60, 70),
		thick: msList(110, 112, 114), thickBaseline: msList(120, 125, 130),
	}
	r := v.result()
	if r.ThickBaseline == nil || r.ThickBaseline.P50 != 125 || r.ThickBaselineRatioP50 != 1.25 || r.ThickRatioP50 != 1.12 {
		t.Fatalf("result: thick baseline %+v ratio %v, thick ratio %v; want p50 125, 1.25 and 1.12", r.ThickBaseline, r.ThickBaselineRatioP50, r.ThickRatioP50)
	}
	o := &overheadResult{Delegates: kindReal, Networks: 3, Add: r, Del: r, DaemonCPUPerAddDel: 20, BaselineDaemonCPUPerAddDel: 31}
	var out strings.Builder
	(&results{Overhead: []*overheadResult{o}}).printTable(&out)
	for _, want := range []string{"Thick baseline", "125.0 / 130.0", "1.250×", "real, 3 nets: 20.0 (thick baseline 31.0)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	v.thickBaseline = nil
	r = v.result()
	if r.ThickBaseline != nil {
		t.Fatalf("result without a thick baseline arm: %+v, want none", r.ThickBaseline)
	}
	o = &overheadResult{Delegates: kindReal, Networks: 3, Add: r, Del: r}
	out.Reset()
	(&results{Overhead: []*overheadResult{o}}).printTable(&out)
	if strings.Contains(out.String(), "baseline") {
		t.Errorf("report without a thick baseline arm mentions one:\n%s", out.String())
	}
}

// The fresh-pod section is reported with thick mode beside manifold, and its
// baseline arms only when the run had them.
func TestFreshReport(t *testing.T) {
	v := verbSamples{
		manifold: msList(150, 160, 170), reference: msList(100, 100, 100), overhead: msList(50, 60, 70),
		thick: msList(104, 106, 108),
	}
	r := v.result()
	o := &overheadResult{Delegates: kindNoop, Networks: 3, Add: r, Del: r}
	var out strings.Builder
	(&results{Fresh: []*overheadResult{o}}).printTable(&out)
	for _, want := range []string{"Pods written to 10ms before each ADD", "160.0 / 170.0", "106.0 / 108.0", "1.600×", "1.060×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "baseline") {
		t.Errorf("report without baseline arms mentions one:\n%s", out.String())
	}

	v.baseline, v.thickBaseline = msList(250, 260, 270), msList(190, 200, 210)
	r = v.result()
	o = &overheadResult{Delegates: kindNoop, Networks: 3, Add: r, Del: r}
	out.Reset()
	(&results{Fresh: []*overheadResult{o}}).printTable(&out)
	for _, want := range []string{"baseline arms", "260.0 / 270.0", "2.600×", "200.0 / 210.0", "2.000×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report with baseline arms lacks %q:\n%s", want, out.String())
		}
	}
}
