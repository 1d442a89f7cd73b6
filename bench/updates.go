package main

// The updates section (issue 26): what an edit of a running pod that changes
// nothing the hot-plug reads (a label patch) costs the node daemon, on a pod
// whose record is near its size cap (many NADs with large configs), in CPU
// time of the daemon process. Thick mode, one daemon per arm watching the
// node's pods, each arm with a pod of its own: this manifold, and the
// -baseline one when given (before/after in one run).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// runUpdates measures -n-updates label patches per arm, the arms taking
// turns: the daemon's CPU time from the patch until it is idle again, and
// the same wait with no patch, for scale.
func runUpdates(b *bench, s settings, r *report) error {
	n := s.updates
	logf("updates: %d label patches per arm of a pod whose record is near the size cap", n)
	if err := b.bigNADs(); err != nil {
		return err
	}
	binaries := map[string]string{"manifold": b.manifold}
	arms := []string{"manifold"}
	if b.baseline != "" {
		binaries["baseline"], arms = b.baseline, append(arms, "baseline")
	}
	running := map[string]*updatesArm{}
	for _, arm := range arms {
		a, err := b.updatesArm(arm, binaries[arm])
		if err != nil {
			return fmt.Errorf("%s: %w", arm, err)
		}
		running[arm] = a
	}
	st, err := b.trial(arms, 0, n).run(func(i int, arm string, rec record) error {
		a := running[arm]
		cpu, err := b.settledCPU(a.daemon.pid, func() error { return b.patchMeta(a.pod, "labels", "bench-update", fmt.Sprint(i)) })
		if err != nil {
			return fmt.Errorf("%s: update %d: %w", arm, i, err)
		}
		idle, err := b.settledCPU(a.daemon.pid, func() error { return nil })
		if err != nil {
			return fmt.Errorf("%s: idle wait %d: %w", arm, i, err)
		}
		rec("update", cpu)
		rec("idle", idle)
		return nil
	})
	if err != nil {
		return err
	}
	record := running["manifold"].recordBytes
	w := r.out("updates")
	fmt.Fprintf(w, "\nThe daemon's CPU per no-op pod update (a label patch; %d updates per arm, a record of %.1f MiB, %d networks), ms mean\n",
		n, float64(record)/(1<<20), updatesNADs+1)
	var out []obj
	for _, arm := range arms {
		update, idle := st.mean(key(arm, "update")), st.mean(key(arm, "idle"))
		out = append(out, obj{{"arm", arm}, {"daemon_cpu_ms_per_update", update}, {"daemon_cpu_ms_per_idle_wait", idle}})
		fmt.Fprintf(w, "  %s: %.2f per update (idle %.2f per wait)\n", arm, update, idle)
	}
	r.set("updates", obj{{"updates", n}, {"networks", updatesNADs + 1}, {"record_bytes", record},
		{"note", "thick mode; a label patch of a running pod whose record holds " + fmt.Sprint(updatesNADs) + " NADs of ~880 KiB configs (the static plugin); the daemon's CPU time (user and system, /proc) from the patch until it has been idle for 300 ms"},
		{"arms", out}})
	return nil
}

// updatesArm is an arm's daemon, its running pod, and the size of the
// pod's record.
type updatesArm struct {
	daemon      *thickArm
	pod         *podSpec
	recordBytes int64
}

// updatesArm starts a daemon of manifold for the arm, and ADDs through its
// shim a pod that asks for every big NAD.
func (b *bench) updatesArm(arm, manifold string) (*updatesArm, error) {
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
	return &updatesArm{daemon: d, pod: pod, recordBytes: st.Size()}, nil
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
		if err := b.createNAD(namespace, bigNAD(i), conf, nil, false); err != nil {
			return err
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
