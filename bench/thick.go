package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// armThick is thick mode (docs/thick-mode.md): the runtime calls manifold-shim,
// which passes the call to a running `manifold daemon`. The delegates are the
// daemon's children, so only wall time is measured for this arm.
const armThick = "thick"

// armThickBaseline is armThick with the -baseline manifold as the daemon
// and/or the -baseline-shim as the shim, for before/after comparisons of
// thick mode in one interleaved run. It has its own daemon and socket.
const armThickBaseline = "thick-baseline"

// armThickConcurrent is armThick with concurrentAttachments on: the same
// binaries, a config that attaches independent extra networks at once
// (docs/configuration.md), and a daemon of its own, so that each daemon's CPU
// over the run is that of one arm's calls (overheadCPU).
const armThickConcurrent = "thick-concurrent"

// thickArm is one daemon and the bin dir whose manifold-shim calls it.
type thickArm struct {
	dir, socket string
	pid         int
	runtime     *libcni.CNIConfig
}

// setupThick starts the thick arms, and the thick baseline arm when
// -baseline or -baseline-shim was given.
func (b *bench) setupThick() error {
	shim := os.Getenv("MANIFOLD_SHIM")
	if shim == "" {
		shim = filepath.Join(b.dir, "manifold-shim")
		if err := b.goBuild(shim, "./cmd/manifold-shim", "-ldflags", "-s -w"); err != nil {
			return err
		}
	}
	var err error
	if b.thick, err = b.startThickArm("thick", b.manifold, shim); err != nil {
		return err
	}
	if b.thickConc, err = b.startThickArm("thick-concurrent", b.manifold, shim); err != nil {
		return err
	}
	if b.baseline == "" && b.baselineShim == "" {
		return nil
	}
	daemon, baseShim := b.manifold, shim
	if b.baseline != "" {
		daemon = b.baseline
		if !strings.Contains(daemonUsage(daemon), "-socket") {
			// A revision from before thick mode: the thin baseline arm only.
			logf("-baseline %s has no daemon mode: no thick baseline arm", daemon)
			return nil
		}
	}
	if b.baselineShim != "" {
		baseShim = b.baselineShim
	}
	b.thickBase, err = b.startThickArm("thick-baseline", daemon, baseShim)
	return err
}

// startThickArm starts a daemon for an arm of the overhead section, with
// the bench's cniDir, any MANIFOLD_BENCH_DAEMON_FLAGS (to measure the
// daemons as a node runs them: "--node-name <benchNode>" turns hot-plug's
// pod watch on for the bench's pods), and for the daemon under test
// MANIFOLD_BENCH_DAEMON_PROFILE's CPU profile (docs/performance.md).
func (b *bench) startThickArm(name, manifold, shim string) (*thickArm, error) {
	flags := strings.Fields(os.Getenv("MANIFOLD_BENCH_DAEMON_FLAGS"))
	if prof := os.Getenv("MANIFOLD_BENCH_DAEMON_PROFILE"); prof != "" && name == "thick" {
		flags = append(flags, "--cpu-profile", prof)
	}
	return b.startDaemon(name, manifold, shim, b.cniDir, flags...)
}

// startDaemon makes a bin dir under the bench dir named name (the plugins,
// shim as manifold-shim, and manifold for the shim's fallback), and starts
// manifold as the daemon on a socket of its own, with cniDir and flags.
func (b *bench) startDaemon(name, manifold, shim, cniDir string, flags ...string) (*thickArm, error) {
	a := &thickArm{dir: filepath.Join(b.dir, name+"-bin"), socket: filepath.Join(b.dir, name+"-daemon", "manifold.sock")}
	for _, d := range []string{a.dir, cniDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := testenv.LinkBinDir(a.dir, b.plugins, manifold); err != nil {
		return nil, err
	}
	if err := os.Symlink(shim, filepath.Join(a.dir, "manifold-shim")); err != nil {
		return nil, err
	}
	// The daemon's flags fix the config's node paths (thickConfList's keys).
	// A -baseline daemon that predates those flags takes the paths from
	// each config instead, and would refuse the flags.
	if strings.Contains(daemonUsage(manifold), "-bin-dir") {
		flags = append([]string{"--bin-dir", a.dir, "--cni-dir", cniDir, "--conf-dir", b.netDir, "--kubeconfig", b.cp.KubeconfigPath}, flags...)
	}
	daemon, err := testenv.RunDaemon(manifold, a.socket, os.Stderr, flags...)
	if err != nil {
		return nil, err
	}
	a.pid = daemon.Pid()
	b.onCleanup(func() {
		if err := daemon.Terminate(); err != nil {
			logf("%v", err)
		}
	})
	a.runtime = libcni.NewCNIConfigWithCacheDir([]string{a.dir}, b.runtimeCache, &benchExec{})
	return a, nil
}

// sectionDaemon is a daemon of a section's own, of the manifold under test
// or another, with the thick arm's shim.
func (b *bench) sectionDaemon(name, manifold, cniDir string, flags ...string) (*thickArm, error) {
	shim, err := os.Readlink(filepath.Join(b.thick.dir, "manifold-shim"))
	if err != nil {
		return nil, err
	}
	return b.startDaemon(name, manifold, shim, cniDir, flags...)
}

// thickArmOf is the daemon behind a thick arm, or nil for other arms.
func (b *bench) thickArmOf(arm string) *thickArm {
	switch arm {
	case armThick:
		return b.thick
	case armThickConcurrent:
		return b.thickConc
	case armThickBaseline:
		return b.thickBase
	}
	return nil
}

// cpuPIDOf is the process whose CPU time an arm's calls are measured by:
// the daemon of a thick arm, the floor process, or 0 for the other arms.
func (b *bench) cpuPIDOf(arm string) int {
	if a := b.thickArmOf(arm); a != nil {
		return a.pid
	}
	if arm == armFloor && b.floor != nil {
		return b.floor.pid
	}
	return 0
}

// thickConfList is manifoldConfList for a thick arm: the same keys, with
// manifold-shim as the type and the arm's daemon socket.
func (b *bench) thickConfList(kind string, a *thickArm) (*libcni.NetworkConfigList, error) {
	list, err := b.manifoldConfList(kind, a.dir)
	if err != nil {
		return nil, err
	}
	return withKeys(list, map[string]any{"type": "manifold-shim", "daemonSocket": a.socket})
}

// withKeys is a copy of manifold's config list with keys set in its plugin.
func withKeys(list *libcni.NetworkConfigList, keys map[string]any) (*libcni.NetworkConfigList, error) {
	var raw map[string]any
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		return nil, err
	}
	plugin := raw["plugins"].([]any)[0].(map[string]any)
	for k, v := range keys {
		plugin[k] = v
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(data)
}

// daemonUsage is the usage text of this binary's `manifold daemon -h` (a
// binary without a daemon mode answers as a CNI plugin called with no
// command).
func daemonUsage(manifold string) string {
	out, _ := exec.Command(manifold, "daemon", "-h").CombinedOutput()
	return string(out)
}

// settleCPU is how long the overhead section waits, before and after its
// recorded iterations, for the work that the processes it measures put off
// after a call (the daemon reaps its delegates up to 350 ms after their
// exit: delegate/reaplater.go), so that the CPU read covers the recorded
// calls' work and no other.
const settleCPU = time.Second

// overheadCPU is the CPU time that the process behind each measured arm
// (cpuPIDOf) uses over the recorded iterations. Each such arm has a process
// of its own, so the process's CPU from the first recorded iteration to the
// last, with the work it put off after its last call, is that arm's; its
// time between its calls, while the other arms run, is counted too. A
// window around each call would miss what the process does after it
// answers, or charge it to the next arm.
type overheadCPU struct {
	pids  map[string]int
	start map[string]time.Duration
}

// startOverheadCPU waits settleCPU for the warm-up's put-off work, then
// reads the CPU time of each of arms' processes.
func (b *bench) startOverheadCPU(arms []string) (*overheadCPU, error) {
	time.Sleep(settleCPU)
	c := &overheadCPU{pids: map[string]int{}, start: map[string]time.Duration{}}
	for _, arm := range arms {
		pid := b.cpuPIDOf(arm)
		if pid == 0 {
			continue
		}
		used, err := processCPU(pid)
		if err != nil {
			return nil, err
		}
		c.pids[arm], c.start[arm] = pid, used
	}
	return c, nil
}

// stop waits settleCPU and returns the CPU time each arm's process used
// since startOverheadCPU.
func (c *overheadCPU) stop() (map[string]time.Duration, error) {
	time.Sleep(settleCPU)
	used := map[string]time.Duration{}
	for arm, pid := range c.pids {
		now, err := processCPU(pid)
		if err != nil {
			return nil, err
		}
		used[arm] = now - c.start[arm]
	}
	return used, nil
}
