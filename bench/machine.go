package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// processStarts is how this machine starts processes, measured at the start
// of the overhead section. Every call in the benchmark is a few process
// starts, and two of manifold's ways to run below the delegates' own cost
// (the early start of the next delegate, prestartDelegates, and
// concurrentAttachments) overlap process starts on two CPUs. They can only
// win where two starts at once take less time than one after the other
// (docs/performance-history.md, change 17).
type processStarts struct {
	// Starts is how many runs of the static noop plugin's VERSION each
	// half of the probe made.
	Starts int `json:"starts"`
	// SerialMs is the wall time per start, one after the other.
	SerialMs float64 `json:"serial_ms_per_start"`
	// CPUMs and MinorFaults are one start's CPU time (user and system)
	// and page faults, means from the serial runs' rusage.
	CPUMs       float64 `json:"cpu_ms_per_start"`
	MinorFaults float64 `json:"minor_faults_per_start"`
	// Streams is how many starts ran at once in the parallel half (the
	// CPUs, at least 2), and Speedup the serial half's wall time over the
	// parallel half's for the same number of starts: Streams at best, and
	// 1 or below where the machine runs process starts one at a time.
	Streams int     `json:"parallel_streams"`
	Speedup float64 `json:"parallel_speedup"`
}

// overlapHelps is the speedup below which the probe's report says that
// overlapping process starts cannot pay off on this machine: less than a
// quarter of a second CPU's worth.
const overlapHelps = 1.25

// probeProcessStarts runs bin (with CNI_COMMAND=VERSION) n times one after
// the other, then n times in streams at once, after a few unmeasured runs.
func probeProcessStarts(ctx context.Context, bin string, n int) (*processStarts, error) {
	streams := max(runtime.NumCPU(), 2)
	n = max(n/streams*streams, streams)
	run := func() (*syscall.Rusage, error) {
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s VERSION: %w: %s", bin, err, out)
		}
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return ru, nil
	}
	for range 5 {
		if _, err := run(); err != nil {
			return nil, err
		}
	}
	r := &processStarts{Starts: n, Streams: streams}
	var cpu time.Duration
	var faults int64
	start := time.Now()
	for range n {
		ru, err := run()
		if err != nil {
			return nil, err
		}
		if ru != nil {
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			faults += ru.Minflt
		}
	}
	serial := time.Since(start)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	start = time.Now()
	for s := range streams {
		wg.Go(func() {
			for range n / streams {
				if _, err := run(); err != nil {
					errs[s] = err
					return
				}
			}
		})
	}
	wg.Wait()
	parallel := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	r.SerialMs = ms(serial) / float64(n)
	r.CPUMs = ms(cpu) / float64(n)
	r.MinorFaults = float64(faults) / float64(n)
	r.Speedup = ratio(ms(serial), ms(parallel))
	return r, nil
}

// summary is the probe's line in the report.
func (p *processStarts) summary() string {
	s := fmt.Sprintf("a static Go process start (noop VERSION): %.1f ms, %.1f ms CPU, %.0f page faults; %d at once: %.2f× as fast as one after the other (at best %d×)",
		p.SerialMs, p.CPUMs, p.MinorFaults, p.Streams, p.Speedup, p.Streams)
	if p.Speedup < overlapHelps {
		s += "\n  this machine barely runs process starts in parallel: overlapping them (prestartDelegates, concurrentAttachments) gains little here, and the targets below 1× direct are out of its reach"
	}
	return s
}
