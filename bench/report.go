package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// results is everything one run measured; it is what -out writes.
type results struct {
	Meta     meta              `json:"meta"`
	Startup  *startupResult    `json:"startup,omitempty"`
	Overhead []*overheadResult `json:"overhead,omitempty"`
	// Targets are the overhead section's figures against the targets.
	Targets []target `json:"targets,omitempty"`
	// Fresh is the overhead of pods written to just before each ADD.
	Fresh       []*overheadResult `json:"fresh_pod,omitempty"`
	API         []*apiResult      `json:"api_requests,omitempty"`
	Concurrency *concResult       `json:"concurrency,omitempty"`
	Scale       *scaleResult      `json:"scale,omitempty"`
	Hotplug     *hotplugResult    `json:"hotplug,omitempty"`
	Updates     *updatesResult    `json:"updates,omitempty"`
	Devices     *devicesResult    `json:"devices,omitempty"`
	DRA         *devicesResult    `json:"dra,omitempty"`
	Runtime     *runtimeResult    `json:"runtime,omitempty"`
	RuntimeCRIO *runtimeResult    `json:"runtime_crio,omitempty"`
	Cluster     *clusterResult    `json:"cluster,omitempty"`
	Webhook     *webhookResult    `json:"webhook,omitempty"`
}

type meta struct {
	Started      string         `json:"started"`
	DurationSec  float64        `json:"duration_s"`
	Host         string         `json:"host"`
	CPUs         int            `json:"cpus"`
	Kernel       string         `json:"kernel"`
	GoVersion    string         `json:"go_version"`
	Manifold     string         `json:"manifold_binary"`
	About        string         `json:"manifold_about"`
	Plugins      string         `json:"plugins_dir"`
	LoadAvgStart string         `json:"loadavg_start"`
	LoadAvgEnd   string         `json:"loadavg_end"`
	Settings     map[string]int `json:"settings"`
	// ProcessStarts is the machine's process-start probe (overhead section).
	ProcessStarts *processStarts `json:"process_starts,omitempty"`
	OwnTimeNote   string         `json:"own_time"`
	APIServerNote string         `json:"api_server"`
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (r *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func pp(d dist) string { return fmt.Sprintf("%.1f / %.1f", d.P50, d.P99) }

// printTable writes the human-readable report.
func (r *results) printTable(w io.Writer) {
	m := r.Meta
	fmt.Fprintf(w, "\nmanifold benchmark: %s, %d CPUs, kernel %s, load %s → %s, %.0fs\n",
		m.Started, m.CPUs, m.Kernel, m.LoadAvgStart, m.LoadAvgEnd, m.DurationSec)
	fmt.Fprintf(w, "manifold: %s\n", m.About)
	if m.ProcessStarts != nil {
		fmt.Fprintf(w, "machine: %s\n", m.ProcessStarts.summary())
	}

	if len(r.Overhead) > 0 {
		fmt.Fprintf(w, "\nTime per call, ms, p50 / p99 (arms interleaved; direct = the same delegates called by the runtime itself)\n")
		if p := r.Overhead[0].DelPause; p != "" {
			fmt.Fprintf(w, "(-del-pause: each DEL came %s after its ADD)\n", p)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "delegates\tnets\tverb\tn\tmanifold\tdirect\tratio p50\toverhead p50\tmanifold own\t\t")
		for _, v := range verbRows(r.Overhead) {
			own := "n/a"
			if v.r.Own != nil {
				own = pp(*v.r.Own)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%.3f×\t%.1f\t%s\t\t\n", v.o.Delegates, v.o.Networks, v.name, v.r.Manifold.N,
				pp(v.r.Manifold), pp(v.r.Reference), v.r.RatioP50, v.r.Overhead.P50, own)
		}
		tw.Flush()
		if r.Overhead[0].Add.Own != nil {
			fmt.Fprintf(w, "\nmanifold's own time split, ms p50: before the first delegate / between delegates / after the last; time inside delegates\n")
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "delegates\tnets\tverb\tbefore\tbetween\tafter\tin delegates\t")
			for _, v := range verbRows(r.Overhead) {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", v.o.Delegates, v.o.Networks, v.name,
					v.r.Before.P50, v.r.Between.P50, v.r.After.P50, v.r.Delegates.P50)
			}
			tw.Flush()
		}
	}

	if len(r.Overhead) > 0 && r.Overhead[0].Add.Thick != nil {
		fmt.Fprintf(w, "\nThick mode (manifold-shim + manifold daemon) in the same iterations, ms p50 / p99\n")
		pairTable(w, r.Overhead, "thick", "manifold", func(r verbResult) (dist, float64, dist, float64) {
			return *r.Thick, r.ThickRatioP50, r.Manifold, r.RatioP50
		})
		fmt.Fprintf(w, "\nThe daemon's CPU time per ADD and DEL (user and system, all threads, over the recorded iterations and the work put off after them; mean, ms)\n")
		for _, o := range r.Overhead {
			fmt.Fprintf(w, "  %s, %d nets: %.1f", o.Delegates, o.Networks, o.DaemonCPUPerAddDel)
			if o.Add.ThickBaseline != nil {
				fmt.Fprintf(w, " (thick baseline %.1f)", o.BaselineDaemonCPUPerAddDel)
			}
			if o.FloorCPUPerAddDel > 0 {
				fmt.Fprintf(w, "; floor %.1f", o.FloorCPUPerAddDel)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  (floor: a Go process that runs the same delegates through libcni and nothing else; bench/floor)\n")
		fmt.Fprintf(w, "The daemon's resident memory after the run, MiB now / peak\n")
		for _, o := range r.Overhead {
			if o.DaemonMem == nil {
				continue
			}
			fmt.Fprintf(w, "  %s, %d nets: %s", o.Delegates, o.Networks, o.DaemonMem)
			if o.BaselineDaemonMem != nil {
				fmt.Fprintf(w, " (thick baseline %s)", o.BaselineDaemonMem)
			}
			fmt.Fprintln(w)
		}
	}

	if len(r.Overhead) > 0 && r.Overhead[0].Add.ThickConcurrent != nil {
		fmt.Fprintf(w, "\nThick mode with concurrentAttachments, in the same iterations, ms p50 / p99\n")
		pairTable(w, r.Overhead, "concurrent", "thick", func(r verbResult) (dist, float64, dist, float64) {
			return *r.ThickConcurrent, r.ThickConcurrentRatioP50, *r.Thick, r.ThickRatioP50
		})
		fmt.Fprintf(w, "\nThe daemon's CPU time per ADD and DEL with concurrentAttachments (mean, ms)\n")
		for _, o := range r.Overhead {
			fmt.Fprintf(w, "  %s, %d nets: %.1f\n", o.Delegates, o.Networks, o.ConcurrentDaemonCPUPerAddDel)
		}
	}
	printTargets(w, r.Overhead, m.ProcessStarts)

	if len(r.Overhead) > 0 && r.Overhead[0].Add.ThickBaseline != nil {
		fmt.Fprintf(w, "\nThick baseline (-baseline daemon and/or -baseline-shim) in the same iterations, ms p50 / p99\n")
		pairTable(w, r.Overhead, "thick baseline", "thick", func(r verbResult) (dist, float64, dist, float64) {
			return *r.ThickBaseline, r.ThickBaselineRatioP50, *r.Thick, r.ThickRatioP50
		})
	}

	if len(r.Overhead) > 0 && r.Overhead[0].Add.Baseline != nil {
		fmt.Fprintf(w, "\nBaseline (-baseline binary) in the same iterations, ms p50 / p99\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "delegates\tnets\tverb\tbaseline\tmanifold\tbaseline own\tmanifold own\t")
		for _, v := range verbRows(r.Overhead) {
			bown, own := "n/a", "n/a"
			if v.r.BaselineOwn != nil && v.r.Own != nil {
				bown, own = pp(*v.r.BaselineOwn), pp(*v.r.Own)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", v.o.Delegates, v.o.Networks, v.name, pp(*v.r.Baseline), pp(v.r.Manifold), bown, own)
		}
		tw.Flush()
	}

	if len(r.Fresh) > 0 {
		fmt.Fprintf(w, "\nPods written to %v before each ADD (as by the kubelet's status update), ms p50 / p99\n", freshDelay)
		pairTable(w, r.Fresh, "manifold", "thick", func(r verbResult) (dist, float64, dist, float64) {
			return r.Manifold, r.RatioP50, derefDist(r.Thick), r.ThickRatioP50
		})
		if r.Fresh[0].Add.Baseline != nil || r.Fresh[0].Add.ThickBaseline != nil {
			fmt.Fprintf(w, "\nThe same, baseline arms (-baseline, -baseline-shim)\n")
			pairTable(w, r.Fresh, "baseline", "thick baseline", func(r verbResult) (dist, float64, dist, float64) {
				base, thickBase := derefDist(r.Baseline), derefDist(r.ThickBaseline)
				return base, ratio(base.P50, r.Reference.P50), thickBase, r.ThickBaselineRatioP50
			})
		}
	}

	if len(r.API) > 0 {
		fmt.Fprintf(w, "\nAPI requests per call (kube-apiserver apiserver_request_total, pods/NADs/events; etcd: the API server's etcd requests for them, etcd_requests_total)\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "arm\tnets\tcalls\tper ADD\tper DEL")
		for _, a := range r.API {
			arm := a.Arm
			if a.OlderRuntime {
				arm += " (runtime passes no pod annotations)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", arm, a.Networks, a.Calls, formatCounts(a.PerAdd), formatCounts(a.PerDel))
		}
		tw.Flush()
	}

	if s := r.Startup; s != nil {
		fmt.Fprintf(w, "\nStart-up (VERSION, %d interleaved runs), ms p50 / p99\n", s.Iterations)
		fmt.Fprintf(w, "  manifold %s, noop %s, ratio %.3f×, overhead p50 %.1f ms\n", pp(s.Manifold), pp(s.Noop), s.RatioP50, s.Overhead.P50)
		if s.Baseline != nil {
			fmt.Fprintf(w, "  baseline %s\n", pp(*s.Baseline))
		}
		fmt.Fprintf(w, "  peak RSS at VERSION: manifold %.1f MiB, noop %.1f MiB; binary: manifold %.1f MiB, noop %.1f MiB\n",
			mib(s.ManifoldRSSKiB), mib(s.NoopRSSKiB), mib(s.ManifoldSizeKiB), mib(s.NoopSizeKiB))
	}
	if len(r.Overhead) > 0 {
		fmt.Fprintf(w, "\nPeak RSS of manifold during ADD, MiB (median / largest of the shim runs; largest delegate)\n")
		for _, o := range r.Overhead {
			fmt.Fprintf(w, "  %s, %d nets: %.1f / %.1f (delegate %.1f)\n", o.Delegates, o.Networks, mib(o.MedianRSSKiB), mib(o.PeakRSSKiB), mib(o.DelegatePeakRSSKiB))
		}
	}

	if c := r.Concurrency; c != nil {
		fmt.Fprintf(w, "\nConcurrency: %d pods at once (%s, %d nets), %d rounds, ms p50 / p99\n", c.Pods, c.Delegates, c.Networks, c.Rounds)
		fmt.Fprintf(w, "  ADD manifold %s, direct %s, ratio p50 %.3f×, p99 %.3f×\n", pp(c.Add.Manifold), pp(c.Add.Reference), c.Add.RatioP50, c.Add.RatioP99)
		fmt.Fprintf(w, "  DEL manifold %s, direct %s, ratio p50 %.3f×, p99 %.3f×\n", pp(c.Del.Manifold), pp(c.Del.Reference), c.Del.RatioP50, c.Del.RatioP99)
		fmt.Fprintf(w, "  ADD thick %s, ratio p50 %.3f×, p99 %.3f×\n", pp(c.Add.Thick), c.Add.ThickRatioP50, c.Add.ThickRatioP99)
		fmt.Fprintf(w, "  DEL thick %s, ratio p50 %.3f×, p99 %.3f×\n", pp(c.Del.Thick), c.Del.ThickRatioP50, c.Del.ThickRatioP99)
		fmt.Fprintf(w, "  whole round of ADDs: manifold %.0f ms, direct %.0f ms, thick %.0f ms (p50)\n", c.RoundAddManifold.P50, c.RoundAddReference.P50, c.RoundAddThick.P50)
	}

	if s := r.Scale; s != nil {
		fmt.Fprintf(w, "\nScale: %d sequential pods (%s, %d nets), ms p50 / p99\n", s.Cycles, s.Delegates, s.Networks)
		fmt.Fprintf(w, "  ADD first %d %s, last %d %s, growth %.3f×, slope %+.2f ms per 1000 pods\n", s.Window, pp(s.AddFirst), s.Window, pp(s.AddLast), s.AddGrowth, s.AddSlope)
		fmt.Fprintf(w, "  DEL first %d %s, last %d %s, growth %.3f×, slope %+.2f ms per 1000 pods\n", s.Window, pp(s.DelFirst), s.Window, pp(s.DelLast), s.DelGrowth, s.DelSlope)
		fmt.Fprintf(w, "  direct reference ADD first %d %s, last %d %s; manifold/direct p50 first %.3f×, last %.3f×, growth %.3f×\n",
			s.Window, pp(s.RefAddFirst), s.Window, pp(s.RefAddLast), s.RatioFirst, s.RatioLast, s.RatioGrowth)
		if s.AddOwnFirst != nil {
			fmt.Fprintf(w, "  manifold's own time per ADD: first %d %s, last %d %s\n", s.Window, pp(*s.AddOwnFirst), s.Window, pp(*s.AddOwnLast))
		}
		fmt.Fprintf(w, "  files left in cniDir: %d, in the runtime's cache: %d\n", len(s.Leftovers), len(s.RuntimeLeftovers))
		for i, f := range append(s.Leftovers, s.RuntimeLeftovers...) {
			if i == 10 {
				fmt.Fprintf(w, "    …\n")
				break
			}
			fmt.Fprintf(w, "    %s\n", f)
		}
	}
	r.Hotplug.print(w)
	r.Updates.print(w)
	r.Devices.print(w)
	r.DRA.print(w)
	r.Webhook.print(w)

	if r.Cluster != nil {
		r.Cluster.print(w)
	}
	if r.Runtime != nil {
		r.Runtime.print(w)
	}
	if r.RuntimeCRIO != nil {
		r.RuntimeCRIO.print(w)
	}
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// derefDist is *d, or an empty dist for an arm the run did not have.
func derefDist(d *dist) dist {
	if d == nil {
		return dist{}
	}
	return *d
}

// verbRow is one line of a per-verb table: a pod shape and one of its verbs.
type verbRow struct {
	o    *overheadResult
	name string
	r    verbResult
}

// pairTable writes one row per shape and verb: arms a and b, as pick gives
// them with their ratios to the reference, beside the reference itself.
func pairTable(w io.Writer, shapes []*overheadResult, a, b string, pick func(verbResult) (dist, float64, dist, float64)) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "delegates\tnets\tverb\t%s\t%s\tdirect\t%s/direct\t%s/direct\t\n", a, b, a, b)
	for _, v := range verbRows(shapes) {
		da, ra, db, rb := pick(v.r)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.3f×\t%.3f×\t\n", v.o.Delegates, v.o.Networks, v.name,
			pp(da), pp(db), pp(v.r.Reference), ra, rb)
	}
	tw.Flush()
}

// verbRows lists ADD then DEL of every pod shape.
func verbRows(shapes []*overheadResult) []verbRow {
	rows := make([]verbRow, 0, 2*len(shapes))
	for _, o := range shapes {
		rows = append(rows, verbRow{o, "ADD", o.Add}, verbRow{o, "DEL", o.Del})
	}
	return rows
}
