package daemon

import (
	"os"
	"runtime"
)

// cpusPerP is how many of the CPUs that Go would use by default the daemon
// takes one P for (a P is what runs Go code: GOMAXPROCS of them run at once).
//
// The daemon's own work per call is small and spread over many goroutines
// that wait on delegates, pipes and the API server. With several Ps, each of
// those wake-ups can wake an idle thread to look for work, a context switch
// that costs more than the work it finds; on one P they queue instead. One P
// for every 8 CPUs keeps that on the nodes of most clusters, and still lets a
// large node's storm of pods spread the daemon's work over more than one CPU
// (docs/thick-mode.md, "CPU"; docs/performance-history.md, change 20).
const cpusPerP = 8

// daemonProcs is the daemon's GOMAXPROCS for Go's default of def: def/cpusPerP
// rounded up.
func daemonProcs(def int) int {
	return max(1, (def+cpusPerP-1)/cpusPerP)
}

// limitProcs sets the daemon's GOMAXPROCS with daemonProcs, unless the
// environment sets GOMAXPROCS, which then stands as Go reads it. It returns
// the value in force.
func limitProcs() int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(daemonProcs(runtime.GOMAXPROCS(0)))
	}
	return runtime.GOMAXPROCS(0)
}
