package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// runRuntime is the figure a user feels: the time from RunPodSandbox to a
// ready sandbox, through a real runtime with runc (e2e/crinode: containerd
// 2.x or CRI-O 1.35, each of -runtimes), with the runtime calling manifold
// (thin and thick) and, as the reference, with the runtime calling the same
// default network's conflist itself. Each arm has its own runtime; the arms
// take turns within every round.
func runRuntime(b *bench, s settings, r *report) error {
	for _, kind := range splitList(s.runtimes) {
		logf("runtime: RunPodSandbox through %s, %d rounds per arm (direct, manifold, thick)", kind, s.runtimeRounds)
		if err := b.sandboxes(r, kind, s.runtimeRounds, 2); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}

// The runtimes of the runtime section (-runtimes), as crinode.Node's Kind
// names them.
const (
	runtimeContainerd = "containerd"
	runtimeCRIO       = "crio"
)

// runtimeArm is one runtime and the conflist in its conf dir.
type runtimeArm struct {
	name string
	node crinode.Node
}

// startNode starts a runtime of kind.
func (b *bench) startNode(kind string, o crinode.Options) (crinode.Node, error) {
	switch kind {
	case runtimeContainerd:
		bins, err := crinode.FindBinaries()
		if err != nil {
			return nil, err
		}
		return crinode.Start(b.ctx, bins, o)
	case runtimeCRIO:
		bins, err := crinode.FindCRIO()
		if err != nil {
			return nil, err
		}
		return crinode.StartCRIO(b.ctx, bins, o)
	}
	return nil, fmt.Errorf("no runtime %q (want %s or %s)", kind, runtimeContainerd, runtimeCRIO)
}

// startRuntimeArm starts a runtime of kind whose CNI conf dir holds conflist
// and whose CNI bin dir is binDir.
func (b *bench) startRuntimeArm(kind, name, binDir string, conflist []byte) (*runtimeArm, error) {
	if kind == runtimeCRIO {
		// CRI-O's GC at its start DELs what the host's libcni cache holds
		// of its network's name and it does not know: each arm's name is
		// its own.
		var list map[string]any
		if err := json.Unmarshal(conflist, &list); err != nil {
			return nil, err
		}
		list["name"] = fmt.Sprint(list["name"], "-crio-", name)
		var err error
		if conflist, err = json.Marshal(list); err != nil {
			return nil, err
		}
	}
	// Short: containerd's socket paths must fit in 104 bytes.
	dir := filepath.Join(b.dir, "runtime-"+name)
	if kind == runtimeCRIO {
		dir = filepath.Join(b.dir, "crio-"+name)
	}
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "00-"+name+".conflist"), conflist, 0o644); err != nil {
		return nil, err
	}
	node, err := b.startNode(kind, crinode.Options{CNIBinDir: binDir, CNIConfDir: confDir, TempDir: dir})
	if err != nil {
		return nil, fmt.Errorf("%s for %s: %w", kind, name, err)
	}
	b.onCleanup(node.Stop)
	// The runtime loads the conf dir in the background.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready, _, msg, err := node.NetworkReady(b.ctx)
		if err == nil && ready {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s for %s: network not ready after 30s: %s %v", kind, name, msg, err)
		}
	}
	return &runtimeArm{name: name, node: node}, nil
}

// sandboxes measures rounds of RunPodSandbox → ready on each arm, all on the
// runtime kind, the arms in a rotating order, each sandbox stopped and
// removed (not timed) before the next.
func (b *bench) sandboxes(r *report, kind string, rounds, warmup int) error {
	manifoldList, err := b.manifoldConfList(kindReal, b.binDir)
	if err != nil {
		return err
	}
	thickList, err := b.thickConfList(kindReal, b.thick)
	if err != nil {
		return err
	}
	direct, err := b.startRuntimeArm(kind, "direct", b.binDir, []byte(b.networkDef(kindReal, 0).Conf))
	if err != nil {
		return err
	}
	thin, err := b.startRuntimeArm(kind, "manifold", b.binDir, manifoldList.Bytes)
	if err != nil {
		return err
	}
	thick, err := b.startRuntimeArm(kind, "thick", b.thick.dir, thickList.Bytes)
	if err != nil {
		return err
	}
	// One pod per runtime: the sections run one after the other on one API.
	pod, err := b.createPod("runtime-"+kind, kindReal, 1)
	if err != nil {
		return err
	}
	annotations := testenv.KubeletAnnotations(pod.Obj.Annotations, pod.Obj.CreationTimestamp.Time)
	arms := map[string]*runtimeArm{"direct": direct, "manifold": thin, "thick": thick}
	st, err := b.trial([]string{"direct", "manifold", "thick"}, warmup, rounds).run(func(it int, name string, rec record) error {
		a := arms[name]
		cfg := a.node.SandboxConfig(pod.Obj.Namespace, pod.Obj.Name, string(pod.Obj.UID), annotations)
		// Each sandbox is a new attempt of the pod, as after a restart.
		cfg.Metadata.Attempt = uint32(it)
		start := time.Now()
		id, err := a.node.RunSandbox(b.ctx, cfg)
		rec("", time.Since(start))
		if err != nil {
			return fmt.Errorf("%s: RunPodSandbox: %w", a.name, err)
		}
		st, err := a.node.CRIClient().Runtime.PodSandboxStatus(b.ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.GetNetwork().GetIp() == "" {
			return fmt.Errorf("%s: sandbox %s not ready with an IP after RunPodSandbox: %v %v", a.name, id, st.GetStatus(), err)
		}
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		if err := a.node.StopRemove(ctx, id); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	delegates := "bridge + host-local (the default network)"
	section := "runtime"
	if kind == runtimeCRIO {
		section = "runtime_crio"
	}
	r.set(section, obj{{"runtime", kind}, {"rounds", rounds}, {"delegates", delegates},
		{"direct", st.dist("direct")}, {"manifold", st.dist("manifold")}, {"thick", st.dist("thick")},
		{"ratio_p50", st.ratio("manifold", "direct")}, {"thick_ratio_p50", st.ratio("thick", "direct")},
		{"overhead", st.diff("manifold", "direct")}, {"paired_ratio_p50", st.paired("manifold", "direct")},
		{"thick_paired_ratio_p50", st.paired("thick", "direct")}, {"note", runtimeNotes[kind]}})
	w := r.out("runtime")
	fmt.Fprintf(w, "\nRunPodSandbox to ready through %s + runc, ms p50 / p99 (%d rounds, arms interleaved; %s)\n", kind, rounds, delegates)
	fmt.Fprintf(w, "  %-47s%s\n", "direct ("+kind+" calls the conflist itself)", pp(st.dist("direct")))
	fmt.Fprintf(w, "  %-47s%s   ratio of p50s %.3f×, per-round ratio p50 %.3f×, overhead p50 %.1f ms\n", "manifold", pp(st.dist("manifold")),
		st.ratio("manifold", "direct"), st.paired("manifold", "direct"), st.diff("manifold", "direct").P50)
	fmt.Fprintf(w, "  %-47s%s   ratio of p50s %.3f×, per-round ratio p50 %.3f×\n", "thick (manifold-shim + daemon)", pp(st.dist("thick")),
		st.ratio("thick", "direct"), st.paired("thick", "direct"))
	return nil
}

var runtimeNotes = map[string]string{
	runtimeContainerd: "containerd 2.x with runc, native snapshotter, driven over the CRI; one containerd per arm; wall time of RunPodSandbox, which returns once the sandbox is ready with its network",
	runtimeCRIO: "CRI-O 1.35 with runc and conmon, vfs storage, no infra container (PID namespace per container), driven over the CRI; one CRI-O per arm; wall time of RunPodSandbox, which returns once the sandbox is ready with its network, " +
		"its ADD followed by the CHECK through which CRI-O reads the result (in every arm)",
}
