package main

import (
	"strings"
	"testing"
)

// testShape is a shape whose figures are vals by arm, the same for ADD and
// DEL.
func testShape(kind string, nets int, vals map[string][]float64) *shape {
	s := samples{}
	for arm, v := range vals {
		s[k(arm, "ADD")], s[k(arm, "DEL")] = v, v
	}
	return &shape{kind: kind, nets: nets, s: s, cpu: map[string]float64{}, mem: map[string]*procMem{}}
}

// The thick baseline arm is summarised against the same reference as the
// thick arm, and reported only when the run had one.
func TestThickBaselineReport(t *testing.T) {
	vals := map[string][]float64{armManifold: {150, 160, 170}, armDirect: {100, 100, 100}, armThick: {110, 112, 114}, armThickBaseline: {120, 125, 130}}
	sh := testShape(kindReal, 3, vals)
	sh.cpu[armThick], sh.cpu[armThickBaseline] = 20, 31
	add := sh.verbJSON("ADD")
	get := func(o obj, k string) any {
		for _, f := range o {
			if f.k == k {
				return f.v
			}
		}
		return nil
	}
	if d, ok := get(add, "thick_baseline").(dist); !ok || d.P50 != 125 || get(add, "thick_baseline_ratio_p50") != 1.25 || get(add, "thick_ratio_p50") != 1.12 {
		t.Fatalf("thick baseline %v ratio %v, thick ratio %v; want p50 125, 1.25 and 1.12", get(add, "thick_baseline"), get(add, "thick_baseline_ratio_p50"), get(add, "thick_ratio_p50"))
	}
	var out strings.Builder
	printOverhead(&out, []*shape{sh}, nil)
	for _, want := range []string{"Thick baseline", "125.0 / 130.0", "1.250×", "real, 3 nets: 20.0 (thick baseline 31.0)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	delete(vals, armThickBaseline)
	sh = testShape(kindReal, 3, vals)
	if get(sh.verbJSON("ADD"), "thick_baseline") != nil {
		t.Fatalf("figures without a thick baseline arm have one")
	}
	out.Reset()
	printOverhead(&out, []*shape{sh}, nil)
	if strings.Contains(out.String(), "baseline") {
		t.Errorf("report without a thick baseline arm mentions one:\n%s", out.String())
	}
}

// The fresh-pod section is reported with thick mode beside manifold, and its
// baseline arms only when the run had them.
func TestFreshReport(t *testing.T) {
	vals := map[string][]float64{armManifold: {150, 160, 170}, armDirect: {100, 100, 100}, armThick: {104, 106, 108}}
	var out strings.Builder
	printFresh(&out, []*shape{testShape(kindNoop, 3, vals)})
	for _, want := range []string{"Pods written to 10ms before each ADD", "160.0 / 170.0", "106.0 / 108.0", "1.600×", "1.060×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "baseline") {
		t.Errorf("report without baseline arms mentions one:\n%s", out.String())
	}

	vals[armBaseline], vals[armThickBaseline] = []float64{250, 260, 270}, []float64{190, 200, 210}
	out.Reset()
	printFresh(&out, []*shape{testShape(kindNoop, 3, vals)})
	for _, want := range []string{"baseline arms", "260.0 / 270.0", "2.600×", "200.0 / 210.0", "2.000×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report with baseline arms lacks %q:\n%s", want, out.String())
		}
	}
}
