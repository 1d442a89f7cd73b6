package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/ociimage"
)

// storm is a pod storm: n pods created at once, each with one extra network.
type storm struct {
	Pods int `json:"pods"`
	// RunningSec is the time until the last of them runs.
	RunningSec float64 `json:"running_s"`
	// PeakPSSMiB is the highest sum of the proportional set size (resident
	// memory, each shared page split among the processes that map it) of
	// manifold's processes and the delegates they run, sampled every 20 ms.
	PeakPSSMiB float64 `json:"peak_pss_mib"`
	// DaemonPeakPSSMiB is the node daemon's own share of it: its highest
	// PSS in the same samples (thick mode).
	DaemonPeakPSSMiB float64 `json:"daemon_peak_pss_mib,omitempty"`
	// CgroupPeakMiB and LimitMiB are the thick daemon container's memory
	// cgroup's peak (delegates and page cache included) and its limit.
	CgroupPeakMiB float64 `json:"cgroup_peak_mib,omitempty"`
	LimitMiB      float64 `json:"limit_mib,omitempty"`
}

const (
	benchNamespace = "bench"
	directClass    = "direct"
	stormNetwork   = "bench-blue"
	stormBridge    = "mfbenchbr0"
)

// runCluster is what manifold costs on a real one-node cluster
// (e2e/cluster), installed with its image and DaemonSets, in thin and then
// thick mode: a pod from its creation to Running through manifold against
// the same pod whose RuntimeClass sends containerd straight to the primary
// CNI's conflist, interleaved (ratios of the medians, and medians of the
// per-round ratios); a rolling upgrade of the DaemonSet to another image on
// the node, kubectl apply to the end of kubectl rollout status; and the time
// and memory of a pod storm.
func runCluster(b *bench, s settings, r *report) error {
	ctx, rounds, stormPods := b.ctx, s.clusterRounds, s.stormPods
	logf("cluster: a one-node cluster, %d rounds per mode, storms of %d pods", rounds, stormPods)
	dir, err := os.MkdirTemp("", "mfcb-")
	if err != nil {
		return err
	}
	b.onCleanup(func() { os.RemoveAll(dir) })
	directDir := filepath.Join(dir, "direct-net.d")
	if err := os.MkdirAll(directDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(directDir, cluster.PrimaryFile), []byte(cluster.PrimaryConfig()), 0o644); err != nil {
		return err
	}
	cluster.OwnNetwork(stormNetwork, stormBridge)
	logf("cluster: starting a one-node cluster")
	// containerd: the direct arm's RuntimeClass needs a CNI conf dir of its
	// own, which CRI-O has no setting for.
	c, err := cluster.Start(ctx, cluster.Options{TempDir: dir, Runtime: cluster.Containerd,
		Handlers: []crinode.Handler{{Name: directClass, CNIConfDir: directDir}}})
	if err != nil {
		return err
	}
	b.onCleanup(c.Stop)
	if err := cluster.InstallPrimaryPlugins(); err != nil {
		return err
	}
	if err := cluster.WritePrimary(cluster.PrimaryFile, cluster.PrimaryConfig()); err != nil {
		return err
	}
	root, err := testenv.FindRepoRoot()
	if err != nil {
		return err
	}
	images := []string{"ghcr.io/manifold-cni/manifold:bench-v1", "ghcr.io/manifold-cni/manifold:bench-v2"}
	for i, ref := range images {
		res, err := ociimage.Build(ctx, ociimage.Options{Version: fmt.Sprintf("bench-v%d", i+1), Ref: ref, OutPath: filepath.Join(dir, fmt.Sprintf("image-%d.tar", i)), RepoRoot: root})
		if err != nil {
			return err
		}
		if err := c.Node.Import(ctx, res.Path); err != nil {
			return err
		}
	}
	cs := c.Clientset()
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: directClass}, Handler: directClass}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := c.CreateNamespace(ctx, benchNamespace); err != nil {
		return err
	}
	nad, err := nadv1.New(benchNamespace, "blue", `{"cniVersion":"1.0.0","name":"`+stormNetwork+`","plugins":[{"type":"bridge","bridge":"`+stormBridge+
		`","ipam":{"type":"host-local","subnet":"10.247.0.0/24"}}]}`).ToUnstructured()
	if err != nil {
		return err
	}
	if _, err := c.CP.Dynamic().Resource(controlplane.NADResource).Namespace(benchNamespace).Create(ctx, nad, metav1.CreateOptions{}); err != nil {
		return err
	}

	note := "one node: containerd 2.x with runc and a kubelet, the control plane on 127.0.0.1; pods of the node's test image, never pulled; a pod is created and polled by a watch until Running, then deleted (not timed); direct pods have a RuntimeClass whose handler's CNI conf dir holds the primary conflist alone"
	all := samples{}
	figs := map[string]any{}
	storms := map[string]storm{}
	for _, mode := range []cluster.Mode{cluster.Thin, cluster.Thick} {
		name := "thin"
		if mode.Thick {
			name = "thick"
			logf("cluster: switching to thick mode")
			err = c.Switch(ctx, cluster.Thin, cluster.Thick, images[0])
		} else {
			logf("cluster: installing thin mode")
			err = c.Install(ctx, mode, images[0])
		}
		if err != nil {
			return err
		}
		if err := waitPluginType(ctx, mode); err != nil {
			return err
		}
		logf("cluster: %s: %d rounds of a pod to Running, through manifold and direct", mode, rounds)
		st, err := b.trial([]string{"manifold", "direct"}, 1, rounds).run(func(_ int, arm string, rec record) error {
			class := map[string]string{"manifold": "", "direct": directClass}[arm]
			took, err := podToRunning(ctx, c, class)
			rec("", took)
			return err
		})
		if err != nil {
			return err
		}
		all["direct"] = append(all["direct"], st["direct"]...)
		all[name] = st["manifold"]
		figs[name+"_paired_ratio_p50"] = st.paired("manifold", "direct")
		start := time.Now()
		if err := c.Roll(ctx, mode, images[1]); err != nil {
			return err
		}
		figs["upgrade_"+name+"_s"] = time.Since(start).Seconds()
		logf("cluster: %s: a pod storm of %d", mode, stormPods)
		if storms[name], err = podStorm(ctx, c, mode, stormPods); err != nil {
			return err
		}
		// The thick arm starts from the first image too.
		if !mode.Thick {
			if err := c.Roll(ctx, mode, images[0]); err != nil {
				return err
			}
		}
	}
	if err := c.Uninstall(ctx, cluster.Thick); err != nil {
		return err
	}
	r.set("cluster", obj{{"rounds", rounds}, {"direct", all.dist("direct")}, {"thin", all.dist("thin")}, {"thick", all.dist("thick")},
		{"thin_ratio_p50", all.ratio("thin", "direct")}, {"thick_ratio_p50", all.ratio("thick", "direct")},
		{"thin_paired_ratio_p50", figs["thin_paired_ratio_p50"]}, {"thick_paired_ratio_p50", figs["thick_paired_ratio_p50"]},
		{"upgrade_thin_s", figs["upgrade_thin_s"]}, {"upgrade_thick_s", figs["upgrade_thick_s"]},
		{"storm_thin", storms["thin"]}, {"storm_thick", storms["thick"]}, {"note", note}})
	w := r.out("cluster")
	fmt.Fprintf(w, "\nA real one-node cluster, manifold installed from its image with kubectl: a pod's creation to Running, ms p50 / p99 (%d rounds per mode, interleaved with direct)\n", rounds)
	fmt.Fprintf(w, "  direct (RuntimeClass to the primary conflist)  %s\n", pp(all.dist("direct")))
	for _, m := range []string{"thin", "thick"} {
		fmt.Fprintf(w, "  %-47s%s   ratio of p50s %.3f×, per-round ratio p50 %.3f×\n", m, pp(all.dist(m)), all.ratio(m, "direct"), figs[m+"_paired_ratio_p50"])
	}
	fmt.Fprintf(w, "  rolling upgrade of the DaemonSet on the node: thin %.1f s, thick %.1f s\n", figs["upgrade_thin_s"], figs["upgrade_thick_s"])
	for _, m := range []string{"thin", "thick"} {
		st := storms[m]
		fmt.Fprintf(w, "  storm of %d pods (%s): all Running in %.1f s; manifold's and its delegates' memory (PSS) peaked at %.1f MiB", st.Pods, m, st.RunningSec, st.PeakPSSMiB)
		if st.LimitMiB > 0 {
			fmt.Fprintf(w, "; the daemon's own PSS peaked at %.1f MiB; the daemon container's cgroup at %.1f MiB of its %.0f MiB limit", st.DaemonPeakPSSMiB, st.CgroupPeakMiB, st.LimitMiB)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// waitPluginType waits until manifold's config on the host runs mode's
// plugin.
func waitPluginType(ctx context.Context, mode cluster.Mode) error {
	want := `"type":"manifold"`
	if mode.Thick {
		want = `"type":"manifold-shim"`
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(cluster.ManifoldConfig); err == nil && strings.Contains(strings.ReplaceAll(string(b), " ", ""), want) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("manifold's config does not run %s after 2 minutes", want)
}

// podToRunning creates a pod (with the RuntimeClass class, if any), times it
// to Running through a watch, and deletes it.
func podToRunning(ctx context.Context, c *cluster.Cluster, class string) (time.Duration, error) {
	p := cluster.PodSpec(benchNamespace, testenv.UniqueName("round-"), nil)
	if class != "" {
		p.Spec.RuntimeClassName = &class
	}
	pods := c.Clientset().CoreV1().Pods(benchNamespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String()})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("pod %s: the watch ended", p.Name)
			}
			if got, isPod := ev.Object.(*corev1.Pod); isPod && got.Status.Phase == corev1.PodRunning {
				took := time.Since(start)
				return took, c.DeleteAndWait(ctx, 2*time.Minute, got)
			}
		case <-timeout:
			return 0, fmt.Errorf("pod %s (RuntimeClass %q) not Running after 2 minutes; events: %v", p.Name, class, c.EventMessages(ctx, p))
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// podStorm creates n pods with one extra network at once, waits until all
// run, samples the memory of manifold and its delegates meanwhile, and
// deletes them.
func podStorm(ctx context.Context, c *cluster.Cluster, mode cluster.Mode, n int) (storm, error) {
	st := storm{Pods: n}
	var cg string
	if mode.Thick {
		var err error
		if cg, err = cluster.DaemonMemoryCgroup(); err != nil {
			return st, err
		}
		os.WriteFile(filepath.Join(cg, "memory.max_usage_in_bytes"), []byte("0"), 0o644)
	}
	stop := make(chan struct{})
	peak := make(chan pssPeaks, 1)
	go func() { peak <- samplePeakPSS(stop) }()
	pods := make([]*corev1.Pod, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			p := cluster.PodSpec(benchNamespace, testenv.UniqueName("storm-"), map[string]string{cluster.NetworksAnnotation: "blue"})
			pods[i], errs[i] = c.Clientset().CoreV1().Pods(benchNamespace).Create(ctx, p, metav1.CreateOptions{})
		})
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			close(stop)
			return st, errs[i]
		}
		if _, err := c.WaitRunning(ctx, p, 10*time.Minute); err != nil {
			close(stop)
			return st, err
		}
	}
	st.RunningSec = round3(time.Since(start).Seconds())
	close(stop)
	peaks := <-peak
	st.PeakPSSMiB = round3(float64(peaks.all) / (1 << 20))
	st.DaemonPeakPSSMiB = round3(float64(peaks.daemon) / (1 << 20))
	if cg != "" {
		p, _ := cluster.CgroupValue(cg, "memory.max_usage_in_bytes")
		l, _ := cluster.CgroupValue(cg, "memory.limit_in_bytes")
		st.CgroupPeakMiB, st.LimitMiB = round3(float64(p)/(1<<20)), round3(float64(l)/(1<<20))
	}
	return st, c.DeleteAndWait(ctx, 5*time.Minute, pods...)
}

// pssPeaks are samplePeakPSS's highest sum, and the node daemon's highest
// PSS alone, in bytes.
type pssPeaks struct{ all, daemon int64 }

// samplePeakPSS sums, every 20 ms until stop, the proportional set size of
// the processes run from the node's CNI bin dir (manifold, the shim, the
// delegates) and of the node daemon, and returns the highest sum, and the
// daemon's own highest. PSS, not RSS: a hundred copies of one plugin share
// its text pages, and RSS would count them a hundred times.
func samplePeakPSS(stop <-chan struct{}) pssPeaks {
	var peak pssPeaks
	for {
		select {
		case <-stop:
			return peak
		case <-time.After(20 * time.Millisecond):
		}
		var sum int64
		procs, _ := os.ReadDir("/proc")
		for _, d := range procs {
			if _, err := strconv.Atoi(d.Name()); err != nil {
				continue
			}
			exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe"))
			if err != nil || !(strings.HasPrefix(exe, cluster.BinDir+"/") || strings.HasPrefix(exe, "/hostroot"+cluster.BinDir+"/") || filepath.Base(exe) == "manifold-daemon") {
				continue
			}
			pss := pssBytes(d.Name())
			sum += pss
			if filepath.Base(exe) == "manifold-daemon" {
				peak.daemon = max(peak.daemon, pss)
			}
		}
		peak.all = max(peak.all, sum)
	}
}

// pssBytes is a process's Pss, from its smaps_rollup.
func pssBytes(pid string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "smaps_rollup"))
	if err != nil {
		return 0
	}
	kib, _ := procKiB(string(b), "Pss:")
	return kib << 10
}
