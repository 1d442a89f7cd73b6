// Command bench measures what manifold costs on top of the delegates it calls:
// time per ADD and DEL against the same delegates called directly, its own
// time, API requests, start-up, memory, many pods in a row and many at once.
// It runs against a real etcd and kube-apiserver (e2e/controlplane) and the
// real CNI plugins in real network namespaces, so it needs root.
//
//	go run ./bench -out bench-results.json
//
// `make bench` sets MANIFOLD_BIN, MANIFOLD_PLUGINS_DIR, the control plane's
// variables (MANIFOLD_KUBE_APISERVER, MANIFOLD_ETCD, …; e2e/README.md) and
// MANIFOLD_CONTAINERD_DIR (the runtime section's containerd), and with
// RUNTIME=crio or both MANIFOLD_CRIO_DIR (its CRI-O); without them
// it builds what it needs. Its control plane runs without the scheduler and
// the controller manager, so the API load it reports is manifold's alone. The method and a
// run's figures are in docs/performance.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/e2e/controlplane"
)

// settings are the flags: iterations per section, which sections and
// shapes run, and the baselines.
type settings struct {
	iterations, noopIterations, warmup, freshIterations, apiCalls, rssRuns, versionRuns int
	concPods, concRounds, scaleCycles, runtimeRounds, clusterRounds, stormPods          int
	hotplugRounds, deviceIterations, updates, webhookAdmissions                         int
	runtimes, only, baseline, baselineShim, kinds, nets                                 string
	delPause                                                                            time.Duration
}

func main() {
	var s settings
	out := flag.String("out", "", "also write the results as JSON to this file")
	quick := flag.Bool("quick", false, "few iterations of everything, to try the benchmark out")
	flag.IntVar(&s.iterations, "n", 40, "recorded iterations per real-delegate overhead case")
	flag.IntVar(&s.noopIterations, "n-noop", 60, "recorded iterations per noop-delegate overhead case")
	flag.IntVar(&s.warmup, "warmup", 3, "unrecorded warm-up iterations per case")
	flag.IntVar(&s.freshIterations, "n-fresh", 20, "recorded iterations per fresh-pod case (the pod written just before each ADD)")
	flag.IntVar(&s.apiCalls, "api-calls", 20, "ADDs (then DELs) per pod shape when counting API requests")
	flag.IntVar(&s.rssRuns, "rss-runs", 5, "ADDs per overhead case started through the shim, for peak memory")
	flag.IntVar(&s.versionRuns, "version-runs", 200, "VERSION runs of each binary")
	flag.IntVar(&s.concPods, "conc", 20, "pods started at once")
	flag.IntVar(&s.concRounds, "conc-rounds", 3, "rounds of concurrent pods per arm (after one warm-up round)")
	flag.IntVar(&s.scaleCycles, "scale", 1000, "sequential pod ADD/DEL cycles")
	flag.IntVar(&s.clusterRounds, "cluster-rounds", 15, "rounds of a pod to Running per mode on the real cluster (each round: one through manifold, one direct)")
	flag.IntVar(&s.stormPods, "storm", 100, "pods created at once in the cluster section's storms")
	flag.IntVar(&s.runtimeRounds, "runtime-rounds", 30, "rounds of RunPodSandbox per arm through each runtime (after two warm-up rounds)")
	flag.StringVar(&s.runtimes, "runtimes", defaultRuntimes(), "runtimes of the runtime section (containerd,crio); default containerd, and crio too when MANIFOLD_CRIO_DIR is set")
	flag.StringVar(&s.baseline, "baseline", "", "another manifold binary to measure in the same interleaved iterations (before/after), as a plugin and as a thick-mode daemon")
	flag.StringVar(&s.baselineShim, "baseline-shim", "", "another manifold-shim binary for the thick baseline arm (before/after of the shim)")
	flag.IntVar(&s.hotplugRounds, "n-hotplug", 20, "recorded rounds per delegate set of the hotplug section")
	flag.IntVar(&s.deviceIterations, "n-devices", 20, "recorded iterations of the devices and dra sections")
	flag.IntVar(&s.updates, "n-updates", 20, "label patches per arm of the updates section")
	flag.IntVar(&s.webhookAdmissions, "n-webhook", 200, "creates per object kind and arm (with and without the webhook) of the webhook section")
	flag.StringVar(&s.kinds, "kinds", kindReal+","+kindNoop, "delegate sets of the overhead section (real, noop)")
	flag.StringVar(&s.nets, "nets", "1,3,8", "network counts of the overhead section")
	flag.DurationVar(&s.delPause, "del-pause", 0, "pause between each ADD of the overhead section and its DEL; 0: the DEL right after the ADD, which also meets what the daemon's ADD put off (its status write and events)")
	flag.StringVar(&s.only, "only", "", "comma-separated sections to run (startup,overhead,fresh,api,concurrency,scale,hotplug,updates,devices,dra,webhook,cluster,runtime); default all")
	flag.Parse()
	// The binaries are linked into bin dirs elsewhere, so relative paths
	// would not resolve there.
	for _, path := range []*string{&s.baseline, &s.baselineShim} {
		if *path != "" {
			abs, err := filepath.Abs(*path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(2)
			}
			*path = abs
		}
	}
	if *quick {
		s.iterations, s.noopIterations, s.freshIterations, s.warmup, s.apiCalls, s.rssRuns, s.versionRuns = 5, 5, 5, 1, 3, 2, 20
		s.concPods, s.concRounds, s.scaleCycles, s.hotplugRounds, s.deviceIterations = 20, 1, 50, 5, 5
		s.runtimeRounds, s.updates, s.clusterRounds, s.stormPods, s.webhookAdmissions = 5, 5, 3, 20, 20
	}
	if err := run(s, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// meta describes the run and the machine.
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

// section is one part of the benchmark: it measures and adds its figures
// to the report.
type section struct {
	name string
	run  func(b *bench, s settings, r *report) error
}

// sections are the benchmark's sections, in the order they run.
var sections = []section{
	{"startup", runStartup}, {"overhead", runOverhead}, {"fresh", runFresh}, {"api", runAPI},
	{"concurrency", runConcurrency}, {"scale", runScale}, {"hotplug", runHotplug}, {"updates", runUpdates},
	{"devices", runDevices}, {"dra", runDRA}, {"webhook", runWebhook}, {"cluster", runCluster}, {"runtime", runRuntime},
}

func run(s settings, out string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, links, the bridge plugin)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one kills at once.
	go func() { <-ctx.Done(); stop() }()

	started := time.Now()
	m := &meta{
		Started:      started.UTC().Format(time.RFC3339),
		CPUs:         runtime.NumCPU(),
		GoVersion:    runtime.Version(),
		LoadAvgStart: loadAvg(),
		Settings: map[string]int{
			"iterations_real": s.iterations, "iterations_noop": s.noopIterations, "iterations_fresh": s.freshIterations, "warmup": s.warmup,
			"api_calls": s.apiCalls, "version_runs": s.versionRuns, "concurrent_pods": s.concPods,
			"concurrent_rounds": s.concRounds, "scale_cycles": s.scaleCycles, "runtime_rounds": s.runtimeRounds, "updates": s.updates, "webhook_admissions": s.webhookAdmissions,
		},
		OwnTimeNote: "manifold_own = manifold's process lifetime minus the time when at least one delegate process it started existed (their lifetimes overlap, since manifold starts the next delegate early), both from kernel process events (fork to exit)",
	}
	m.Host, _ = os.Hostname()
	var uts syscall.Utsname
	if syscall.Uname(&uts) == nil {
		m.Kernel = utsString(uts.Release[:])
	}
	r := &report{}
	r.set("meta", m)

	b := &bench{ctx: ctx, baseline: s.baseline, baselineShim: s.baselineShim, delPause: s.delPause}
	defer b.cleanup()
	if b.watch, err = startProcWatch(); err != nil {
		logf("no kernel process events (%v): manifold's own time will not be reported", err)
		b.watch = nil
	} else {
		b.onCleanup(b.watch.close)
	}
	pluginsDir, err := findPlugins(ctx)
	if err != nil {
		return err
	}
	bins, err := controlplane.FindBinaries(ctx)
	if err != nil {
		return err
	}
	if err := b.setup(os.Getenv("MANIFOLD_BIN"), pluginsDir, bins); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	m.Manifold, m.Plugins, m.About = b.manifold, b.plugins, about(b.manifold)
	m.APIServerNote = filepath.Base(bins.KubeAPIServer) + " and " + filepath.Base(bins.Etcd) + " on 127.0.0.1, TLS, bearer token"
	b.meta = m

	for _, sec := range sections {
		if s.only == "" || slices.Contains(splitList(s.only), sec.name) {
			if err := sec.run(b, s, r); err != nil {
				return fmt.Errorf("%s: %w", sec.name, err)
			}
		}
	}

	m.LoadAvgEnd = loadAvg()
	m.DurationSec = time.Since(started).Round(time.Second).Seconds()
	w := r.out("header")
	fmt.Fprintf(w, "\nmanifold benchmark: %s, %d CPUs, kernel %s, load %s → %s, %.0fs\n",
		m.Started, m.CPUs, m.Kernel, m.LoadAvgStart, m.LoadAvgEnd, m.DurationSec)
	fmt.Fprintf(w, "manifold: %s\n", m.About)
	if m.ProcessStarts != nil {
		fmt.Fprintf(w, "machine: %s\n", m.ProcessStarts.summary())
	}
	r.print(os.Stdout)
	if out != "" {
		if err := r.writeJSON(out); err != nil {
			return err
		}
		logf("wrote %s", out)
	}
	return nil
}

// runOverhead is the overhead section: the process-start probe, then each
// delegate set and network count of -kinds and -nets.
func runOverhead(b *bench, s settings, r *report) error {
	nets, err := parseNets(s.nets)
	if err != nil {
		return err
	}
	if b.meta.ProcessStarts, err = probeProcessStarts(b.ctx, filepath.Join(b.plugins, "noop"), 60); err != nil {
		return err
	}
	logf("machine: %s", b.meta.ProcessStarts.summary())
	var shapes []*shape
	for _, kind := range splitList(s.kinds) {
		if kind != kindReal && kind != kindNoop {
			return fmt.Errorf("-kinds: %q is not a delegate set (real, noop)", kind)
		}
		for _, n := range nets {
			iters := s.iterations
			if kind == kindNoop {
				iters = s.noopIterations
			}
			logf("overhead: %s delegates, %d networks, %d iterations", kind, n, iters)
			sh, err := b.overhead(kind, n, iters, s.warmup, s.rssRuns, false)
			if err != nil {
				return fmt.Errorf("%s/%d: %w", kind, n, err)
			}
			shapes = append(shapes, sh)
		}
	}
	if len(shapes) == 0 {
		return nil
	}
	r.set("overhead", shapes)
	if ts := targets(shapes); len(ts) > 0 {
		r.set("targets", ts)
	}
	printOverhead(r.out("overhead"), shapes, b.meta.ProcessStarts)
	printRSS(r.out("rss"), shapes)
	return nil
}

// runFresh is the overhead section's 3-network case with the pod written
// just before each ADD (bench/fresh.go).
func runFresh(b *bench, s settings, r *report) error {
	var shapes []*shape
	for _, kind := range []string{kindReal, kindNoop} {
		logf("fresh pods: %s delegates, 3 networks, the pod written %v before each ADD, %d iterations", kind, freshDelay, s.freshIterations)
		sh, err := b.overhead(kind, 3, s.freshIterations, s.warmup, 0, true)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		shapes = append(shapes, sh)
	}
	r.set("fresh_pod", shapes)
	printFresh(r.out("fresh"), shapes)
	return nil
}

// defaultRuntimes is containerd, and CRI-O too when MANIFOLD_CRIO_DIR names
// its build (make bench RUNTIME=crio or both).
func defaultRuntimes() string {
	if os.Getenv("MANIFOLD_CRIO_DIR") != "" {
		return runtimeContainerd + "," + runtimeCRIO
	}
	return runtimeContainerd
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// parseNets reads -nets: network counts, each at least 1.
func parseNets(v string) ([]int, error) {
	var out []int
	for _, x := range splitList(v) {
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 || n > maxNetworks {
			return nil, fmt.Errorf("-nets: %q is not a network count (1 to %d)", x, maxNetworks)
		}
		out = append(out, n)
	}
	return out, nil
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

func utsString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// findPlugins is $MANIFOLD_PLUGINS_DIR, or what hack/build-plugins.sh builds.
func findPlugins(ctx context.Context) (string, error) {
	if d := os.Getenv("MANIFOLD_PLUGINS_DIR"); d != "" {
		return d, nil
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "hack/build-plugins.sh")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build CNI plugins: %w: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// about is the plugin's self-description (skel prints it when CNI_COMMAND is
// unset), which carries the version it was built as.
func about(bin string) string {
	cmd := exec.Command(bin)
	cmd.Env = []string{}
	var buf bytes.Buffer
	cmd.Stderr, cmd.Stdout = &buf, &buf
	_ = cmd.Run()
	return strings.TrimSpace(buf.String())
}
