package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// The arms of a side-by-side measurement.
const (
	armManifold = "manifold" // the runtime calls manifold, which calls the delegates
	armDirect   = "direct"   // the reference: the runtime calls the delegates itself
	// armShim is armManifold with manifold and each delegate started through
	// the shim, which reports peak RSS without the distortion described in
	// bench/shim. Used for memory figures only, never for time.
	armShim = "shim"
	// armBaseline is armManifold with another manifold binary (-baseline),
	// for before/after comparisons in one interleaved run.
	armBaseline = "baseline"
	// armFloor is armDirect in a process of its own (bench/floor.go), for
	// its CPU time.
	armFloor = "floor"
)

// sample is one timed ADD or DEL.
type sample struct {
	// Wall is the runtime's view: the libcni call(s), start to finish.
	Wall time.Duration
	// Proc is what the kernel saw of the manifold process (manifold arm only).
	Proc procTimes
	// MaxRSSKiB is the peak RSS of the manifold process (shim arm only), and
	// DelegateMaxRSSKiB the largest of its delegates'.
	MaxRSSKiB, DelegateMaxRSSKiB int64
}

// Own is manifold's own time: its process lifetime minus the time when at
// least one of the delegate processes it started existed.
func (s sample) Own() time.Duration { return s.Proc.Wall - s.Proc.Delegates }

// call runs ADD or DEL for a sandbox in one arm.
func (b *bench) call(ctx context.Context, arm, verb string, sb *sandbox) (sample, error) {
	switch arm {
	case armDirect:
		return b.directCall(ctx, verb, sb)
	case armFloor:
		return b.floorCall(verb, sb)
	}
	rt := b.runtime
	switch arm {
	case armShim:
		rt = b.shimRuntime
	case armBaseline:
		rt = b.baseRuntime
	case armThick, armThickBaseline, armThickConcurrent:
		rt = b.thickArmOf(arm).runtime
	}
	rec := &recorder{}
	start := time.Now()
	err := cniCall(withRecorder(ctx, rec), rt, b.confs[arm+"/"+sb.Pod.Kind], verb, sb)
	s := sample{Wall: time.Since(start)}
	if err != nil {
		return s, fmt.Errorf("via manifold: %w", err)
	}
	if len(rec.procs) != 1 {
		return s, fmt.Errorf("%s via manifold ran %d processes, want 1", verb, len(rec.procs))
	}
	switch {
	case arm == armShim:
		s.MaxRSSKiB, s.DelegateMaxRSSKiB, err = b.shimPeaks(verb)
	case b.watch != nil && b.thickArmOf(arm) == nil:
		s.Proc, err = b.watch.take(rec.procs[0].PID, 5*time.Second)
	}
	return s, err
}

// cniCall is the runtime's ADD or DEL of a sandbox with manifold's config.
func cniCall(ctx context.Context, rt *libcni.CNIConfig, conf *libcni.NetworkConfigList, verb string, sb *sandbox) error {
	rc := &libcni.RuntimeConf{ContainerID: sb.ContainerID, NetNS: sb.NetNS, IfName: "eth0", Args: sb.args(), CapabilityArgs: sb.capabilityArgs()}
	var err error
	if verb == "ADD" {
		_, err = rt.AddNetworkList(ctx, conf, rc)
	} else {
		err = rt.DelNetworkList(ctx, conf, rc)
	}
	if err != nil {
		return fmt.Errorf("%s %s of pod %s: %w", verb, sb.ContainerID, sb.Pod.Obj.Name, err)
	}
	return nil
}

// directCall is the reference: the delegates of the pod's networks, with the
// interface names and CNI_ARGS manifold would give them, ADD in order (a
// failure undoes what was added, as manifold would) and DEL in reverse.
func (b *bench) directCall(ctx context.Context, verb string, sb *sandbox) (sample, error) {
	start := time.Now()
	lists := b.refLists[sb.Pod.Kind]
	var errs []error
	for i := range sb.Pod.Networks {
		if verb == "DEL" {
			i = sb.Pod.Networks - 1 - i
			errs = append(errs, b.direct.DelNetworkList(ctx, lists[i], b.directConf(sb, i)))
		} else if _, err := b.direct.AddNetworkList(ctx, lists[i], b.directConf(sb, i)); err != nil {
			for j := i; j >= 0; j-- {
				_ = b.direct.DelNetworkList(ctx, lists[j], b.directConf(sb, j))
			}
			return sample{}, fmt.Errorf("direct ADD of network %d of %s: %w", i, sb.ContainerID, err)
		}
	}
	s := sample{Wall: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return s, fmt.Errorf("direct DEL of %s: %w", sb.ContainerID, err)
	}
	return s, nil
}

func (b *bench) directConf(sb *sandbox, i int) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: sb.ContainerID, NetNS: sb.NetNS, IfName: ifName(i), Args: sb.args()}
}

// shimLine is one line of the shim log.
type shimLine struct {
	PPID      int
	Command   string
	Plugin    string
	MaxRSSKiB int64
}

// takeShimLog returns the shim log's lines and empties it. Only serial
// shim-arm calls use the shim dir, so the log holds just their lines.
func (b *bench) takeShimLog() ([]shimLine, error) {
	f, err := os.Open(b.shimLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []shimLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 {
			return nil, fmt.Errorf("shim log line %q: want 5 fields", sc.Text())
		}
		ppid, err1 := strconv.Atoi(fields[0])
		rss, err2 := strconv.ParseInt(fields[4], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("shim log line %q: %w", sc.Text(), err)
		}
		out = append(out, shimLine{PPID: ppid, Command: fields[1], Plugin: fields[2], MaxRSSKiB: rss})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, os.Truncate(b.shimLog, 0)
}

// shimPeaks is the peak RSS of manifold and of its largest delegate, for one
// shim-arm call.
func (b *bench) shimPeaks(verb string) (manifold, delegates int64, err error) {
	lines, err := b.takeShimLog()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range lines {
		switch {
		case l.Command != verb:
			return 0, 0, fmt.Errorf("shim log: %s line during %s", l.Command, verb)
		case l.Plugin == "manifold":
			manifold = max(manifold, l.MaxRSSKiB)
		default:
			delegates = max(delegates, l.MaxRSSKiB)
		}
	}
	if manifold == 0 {
		return 0, 0, errors.New("shim log has no line for manifold")
	}
	return manifold, delegates, nil
}

// addDel runs ADD then, pause later, DEL of a fresh sandbox of pod in one
// arm. A failed ADD is cleaned up with a DEL before the error is returned.
func (b *bench) addDel(arm string, pod *podSpec, netns string, pause time.Duration) (sample, sample, error) {
	sb := b.newSandbox(pod, netns)
	a, err := b.call(b.ctx, arm, "ADD", sb)
	if err != nil {
		_, _ = b.call(b.ctx, arm, "DEL", sb)
		return a, sample{}, err
	}
	time.Sleep(pause)
	d, err := b.call(b.ctx, arm, "DEL", sb)
	return a, d, err
}
