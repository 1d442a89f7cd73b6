package main

import (
	"os"
	"testing"
	"time"
)

func TestParseProcCPU(t *testing.T) {
	// A command name with a space and a ')' of its own; utime 150, stime 27.
	stat := "4242 (manifold (x) d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 27 0 0 20 0 9 0 12345 1000000 500 18446744073709551615"
	got, err := parseProcCPU(stat)
	if err != nil || got != 1770*time.Millisecond {
		t.Errorf("parseProcCPU = %v, %v; want 1.77s", got, err)
	}
	for _, bad := range []string{"", "4242 manifold S 1", "4242 (m) S 1 2 3", "4242 (m) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 27 0"} {
		if _, err := parseProcCPU(bad); err == nil {
			t.Errorf("parseProcCPU(%q) gave no error", bad)
		}
	}
}

func TestParseProcMem(t *testing.T) {
	status := "Name:\tmanifold-daemon\nVmPeak:\t 1300000 kB\nVmHWM:\t   52100 kB\nVmRSS:\t   41000 kB\nThreads:\t9\n"
	got, err := parseProcMem(status)
	if err != nil || *got != (procMem{RSSKiB: 41000, PeakKiB: 52100}) {
		t.Errorf("parseProcMem = %+v, %v; want RSS 41000, peak 52100", got, err)
	}
	for _, bad := range []string{"", "VmRSS:\t41000 kB\n", "VmHWM:\t1 kB\nVmRSS:\tx kB\n", "VmHWM:\t1 kB\nVmRSS:\t41000 pages\n"} {
		if m, err := parseProcMem(bad); err == nil {
			t.Errorf("parseProcMem(%q) = %+v with no error", bad, m)
		}
	}
	// This process: resident, and its peak at least what it holds now.
	m, err := processMem(os.Getpid())
	if err != nil || m.RSSKiB <= 0 || m.PeakKiB < m.RSSKiB {
		t.Errorf("processMem(self) = %+v, %v", m, err)
	}
}

// The figure grows while the process spins. It moves in clock ticks (10 ms),
// and a busy machine may give the spinning goroutine little CPU, so the test
// spins until it grows, for at most 10 s.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		}
		after, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
	}
	t.Errorf("CPU time still %v after 10 s of spinning; want it to grow", before)
}
