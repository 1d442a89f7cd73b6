package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// runStartup compares a bare start of manifold with that of a minimal CNI
// plugin, noop (and of the -baseline binary): VERSION does nothing but
// answer, so its wall time is process start, package initialisation and
// exit. The binaries take turns; then their peak RSS at VERSION is read
// through the shim (see bench/shim for why not directly).
func runStartup(b *bench, s settings, r *report) error {
	logf("start-up: %d VERSION runs each of manifold and noop", s.versionRuns)
	bins := map[string]string{"manifold": b.manifold, "noop": filepath.Join(b.plugins, "noop")}
	arms := []string{"manifold", "noop"}
	if b.baseline != "" {
		bins["baseline"], arms = b.baseline, append(arms, "baseline")
	}
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	st, err := b.trial(arms, 10, s.versionRuns).run(func(_ int, arm string, rec record) error {
		recd := &recorder{}
		if _, err := (&benchExec{}).ExecPlugin(withRecorder(b.ctx, recd), bins[arm], stdin, env); err != nil {
			return err
		}
		rec("", recd.procs[0].Wall)
		return nil
	})
	if err != nil {
		return err
	}
	for range 10 {
		for _, name := range []string{"manifold", "noop"} {
			if _, err := (&benchExec{}).ExecPlugin(b.ctx, filepath.Join(b.shimDir, name), stdin, env); err != nil {
				return err
			}
		}
	}
	lines, err := b.takeShimLog()
	if err != nil {
		return err
	}
	peak, size := map[string]int64{}, map[string]int64{}
	for _, l := range lines {
		peak[l.Plugin] = max(peak[l.Plugin], l.MaxRSSKiB)
	}
	for _, name := range arms[:2] {
		if fi, err := os.Stat(bins[name]); err == nil {
			size[name] = fi.Size() / 1024
		}
	}
	r.set("startup", obj{{"iterations", s.versionRuns}, {"manifold_version", st.dist("manifold")}, {"noop_version", st.dist("noop")},
		{"baseline_version", st.opt("baseline")}, {"overhead", st.diff("manifold", "noop")}, {"ratio_p50", st.ratio("manifold", "noop")},
		{"manifold_version_peak_rss_kib", peak["manifold"]}, {"noop_version_peak_rss_kib", peak["noop"]},
		{"manifold_binary_kib", size["manifold"]}, {"noop_binary_kib", size["noop"]}})
	w := r.out("startup")
	fmt.Fprintf(w, "\nStart-up (VERSION, %d interleaved runs), ms p50 / p99\n", s.versionRuns)
	fmt.Fprintf(w, "  manifold %s, noop %s, ratio %.3f×, overhead p50 %.1f ms\n", pp(st.dist("manifold")), pp(st.dist("noop")),
		st.ratio("manifold", "noop"), st.diff("manifold", "noop").P50)
	if b.baseline != "" {
		fmt.Fprintf(w, "  baseline %s\n", pp(st.dist("baseline")))
	}
	fmt.Fprintf(w, "  peak RSS at VERSION: manifold %.1f MiB, noop %.1f MiB; binary: manifold %.1f MiB, noop %.1f MiB\n",
		mib(peak["manifold"]), mib(peak["noop"]), mib(size["manifold"]), mib(size["noop"]))
	return nil
}
