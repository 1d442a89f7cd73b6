package main

// The updates section (issue 26): what an edit of a running pod that changes
// nothing the hot-plug reads (a label patch) costs the node daemon, on a pod
// whose record is near its size cap (many NADs with large configs), in CPU
// time of the daemon process. Thick mode, one daemon per arm watching the
// node's pods, each arm with a pod of its own: this manifold, and the
// -baseline one when given (before/after in one run).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
)

const (
	// updatesNADs NADs of updatesPad bytes of config each make a record of
	// about 14 MiB, under the 16 MiB cap (scratch.MaxRecordBytes).
	updatesNADs = 16
	updatesPad  = 880 << 10
	// quietPolls: the daemon is done with an update when its CPU time has
	// not moved for this many polls of quietEvery.
	quietPolls = 3
	quietEvery = 100 * time.Millisecond
	quietBound = time.Minute
	// updatesCallTimeout bounds the ADD and DEL of the section's pods.
	updatesCallTimeout = 10 * time.Minute
)

// updatesResult is the updates section.
type updatesResult struct {
	Updates     int           `json:"updates"`
	Networks    int           `json:"networks"`
	RecordBytes int64         `json:"record_bytes"`
	Note        string        `json:"note"`
	Arms        []*updatesArm `json:"arms"`
}

type updatesArm struct {
	Arm string `json:"arm"`
	// CPUPerUpdate is the daemon's CPU time from a label patch of its pod to
	// the daemon being idle again, mean over the updates; IdlePerWait the
	// same wait with no patch, for scale.
	CPUPerUpdate float64 `json:"daemon_cpu_ms_per_update"`
	IdlePerWait  float64 `json:"daemon_cpu_ms_per_idle_wait"`

	daemon *thickArm
	pod    *podSpec
	cpu    time.Duration
	idle   time.Duration
}

// updates measures n label patches per arm, the arms taking turns.
func (b *bench) updates(n int) (*updatesResult, error) {
	if err := b.bigNADs(); err != nil {
		return nil, err
	}
	out := &updatesResult{Updates: n, Networks: updatesNADs + 1,
		Note: "thick mode; a label patch of a running pod whose record holds " + fmt.Sprint(updatesNADs) + " NADs of ~880 KiB configs (the static plugin); the daemon's CPU time (user and system, /proc) from the patch until it has been idle for 300 ms"}
	binaries := []struct{ arm, manifold string }{{"manifold", b.manifold}}
	if b.baseline != "" {
		binaries = append(binaries, struct{ arm, manifold string }{"baseline", b.baseline})
	}
	for _, bin := range binaries {
		a, err := b.updatesArm(bin.arm, bin.manifold)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin.arm, err)
		}
		if out.RecordBytes == 0 {
			out.RecordBytes = a.recordBytes
		}
		out.Arms = append(out.Arms, a.updatesArm)
	}
	for i := 0; i < n; i++ {
		for _, a := range out.Arms {
			cpu, err := b.settledCPU(a.daemon.pid, func() error { return b.patchMeta(a.pod, "labels", "bench-update", fmt.Sprint(i)) })
			if err != nil {
				return nil, fmt.Errorf("%s: update %d: %w", a.Arm, i, err)
			}
			idle, err := b.settledCPU(a.daemon.pid, func() error { return nil })
			if err != nil {
				return nil, fmt.Errorf("%s: idle wait %d: %w", a.Arm, i, err)
			}
			a.cpu, a.idle = a.cpu+cpu, a.idle+idle
		}
	}
	for _, a := range out.Arms {
		a.CPUPerUpdate, a.IdlePerWait = ms(a.cpu)/float64(n), ms(a.idle)/float64(n)
	}
	return out, nil
}

// armWithPod is an arm, its running pod, and the size of the pod's record.
type armWithPod struct {
	*updatesArm
	recordBytes int64
}

// updatesArm starts a daemon of manifold for the arm, and ADDs through its
// shim a pod that asks for every big NAD.
func (b *bench) updatesArm(arm, manifold string) (*armWithPod, error) {
	cniDir := filepath.Join(b.dir, "updates-"+arm+"-cni")
	d, err := b.sectionDaemon("updates-"+arm, manifold, cniDir, "--node-name", benchNode)
	if err != nil {
		return nil, err
	}
	conf, err := b.thickConfList(kindNoop, d)
	if err == nil {
		// The ADD and DEL of a pod with this much config take long on a
		// loaded machine; they are not what is measured.
		conf, err = withKeys(conf, map[string]any{"cniDir": cniDir, "callTimeout": updatesCallTimeout.String()})
	}
	if err != nil {
		return nil, err
	}
	refs := make([]string, updatesNADs)
	for i := range refs {
		refs[i] = bigNAD(i + 1)
	}
	pod, err := b.createPodWith("updates-"+arm, kindNoop, map[string]string{annotNetworks: strings.Join(refs, ",")})
	if err != nil {
		return nil, err
	}
	netns, err := b.newNetNS()
	if err != nil {
		return nil, err
	}
	sb := b.newSandbox(pod, netns.Path())
	start := time.Now()
	if err := b.thickCallWithin(d, conf, "ADD", sb, updatesCallTimeout); err != nil {
		return nil, err
	}
	logf("updates: %s: ADD took %s", arm, time.Since(start).Round(time.Millisecond))
	b.onCleanup(func() {
		if err := b.thickCallWithin(d, conf, "DEL", sb, updatesCallTimeout); err != nil {
			logf("updates: %v", err)
		}
	})
	st, err := os.Stat(filepath.Join(cniDir, sb.ContainerID))
	if err != nil {
		return nil, err
	}
	logf("updates: %s: pod with %d networks, record of %d bytes", arm, updatesNADs+1, st.Size())
	// The ADD's status write and the watch's events of it come first.
	if _, err := b.settledCPU(d.pid, func() error { return nil }); err != nil {
		return nil, err
	}
	return &armWithPod{updatesArm: &updatesArm{Arm: arm, daemon: d, pod: pod}, recordBytes: st.Size()}, nil
}

func bigNAD(i int) string { return fmt.Sprintf("bench-big-%d", i) }

// bigNADs creates the section's NADs: the static plugin, called as a
// network's plugin (it answers with its addresses and touches nothing),
// with its config padded with a key it ignores. (The noop test plugin
// deadlocks on a config over 64 KiB: it writes its stdin to a pipe it
// reads only afterwards.)
func (b *bench) bigNADs() error {
	pad := strings.Repeat("x", updatesPad)
	for i := 1; i <= updatesNADs; i++ {
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"static","ipam":{"type":"static","addresses":[{"address":"10.252.%d.2/24"}]},"pad":%q}]}`, bigNAD(i), i, pad)
		obj, err := nadv1.New(namespace, bigNAD(i), conf).ToUnstructured()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		_, err = b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("create NAD %s: %w", bigNAD(i), err)
		}
	}
	return nil
}

// settledCPU runs act and returns the CPU time that process pid used from
// just before it until the process has been idle for quietPolls polls.
func (b *bench) settledCPU(pid int, act func() error) (time.Duration, error) {
	start, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	if err := act(); err != nil {
		return 0, err
	}
	last, still := start, 0
	for deadline := time.Now().Add(quietBound); still < quietPolls; {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("daemon %d still busy after %s", pid, quietBound)
		}
		select {
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		case <-time.After(quietEvery):
		}
		cur, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		if cur == last {
			still++
		} else {
			last, still = cur, 0
		}
	}
	return last - start, nil
}

// print writes the section's table; nothing when it did not run.
func (r *updatesResult) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nThe daemon's CPU per no-op pod update (a label patch; %d updates per arm, a record of %.1f MiB, %d networks), ms mean\n",
		r.Updates, float64(r.RecordBytes)/(1<<20), r.Networks)
	for _, a := range r.Arms {
		fmt.Fprintf(w, "  %s: %.2f per update (idle %.2f per wait)\n", a.Arm, a.CPUPerUpdate, a.IdlePerWait)
	}
}
