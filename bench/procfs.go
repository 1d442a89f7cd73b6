package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// procKiB reads the value of a "key: N kB" line, as /proc/<pid>/status and
// smaps_rollup write them, from text; key includes its colon.
func procKiB(text, key string) (int64, error) {
	for line := range strings.Lines(text) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == key && f[2] == "kB" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc: %s %q: %w", key, f[1], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc: no %s line in kB", key)
}

// processCPU is the CPU time (user and system) that process pid has used so
// far, all its threads together, including threads that have exited.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcCPU(string(b))
}

// procMem is a process's resident memory, from /proc/<pid>/status.
type procMem struct {
	// RSSKiB is VmRSS, what it holds now; PeakKiB is VmHWM, the most it held.
	RSSKiB  int64 `json:"rss_kib"`
	PeakKiB int64 `json:"peak_rss_kib"`
}

// String is the figures in MiB, "now / peak".
func (m *procMem) String() string {
	return fmt.Sprintf("%.1f / %.1f", float64(m.RSSKiB)/1024, float64(m.PeakKiB)/1024)
}

func processMem(pid int) (*procMem, error) {
	if pid == 0 {
		return nil, nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	return parseProcMem(string(b))
}

// parseProcMem reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func parseProcMem(status string) (*procMem, error) {
	rss, err := procKiB(status, "VmRSS:")
	if err != nil {
		return nil, err
	}
	peak, err := procKiB(status, "VmHWM:")
	if err != nil {
		return nil, err
	}
	return &procMem{RSSKiB: rss, PeakKiB: peak}, nil
}

// parseProcCPU reads utime and stime (in clock ticks of 1/100 s on Linux)
// from the text of /proc/<pid>/stat.
func parseProcCPU(stat string) (time.Duration, error) {
	fields := testenv.StatFields(stat)
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat %q: %d fields after the name, want at least 13", stat, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
