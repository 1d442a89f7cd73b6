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
