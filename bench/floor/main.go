// Command floor runs CNI plugins for manifold's benchmark as a runtime that
// attached every network itself would, and does nothing else: its CPU time
// per ADD and DEL is what running a pod's delegates costs a Go process at
// the least. The benchmark reads it beside the daemon's (bench/floor.go).
//
// It is small on purpose. A Go process's garbage collections cost in
// proportion to what it keeps live, and the benchmark itself keeps what
// client-go and the API types set up at start; run from the benchmark's own
// binary, this floor measured several times the daemon's CPU.
//
//	floor PLUGIN_DIR CACHE_DIR
//
// It serves floorcall's calls on stdin and stdout until stdin ends
// (bench/floorcall).
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/bench/floorcall"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: floor PLUGIN_DIR CACHE_DIR")
		os.Exit(2)
	}
	if err := floorcall.Serve(libcni.NewCNIConfigWithCacheDir([]string{os.Args[1]}, os.Args[2], nil), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
