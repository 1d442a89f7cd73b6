// Command manifold-daemon is thick mode's node daemon (docs/thick-mode.md):
// the socket server that manifold-shim calls, the pod watch and hot-plug
// (docs/hotplug.md), and the daemon's metrics. It is a binary of its own so
// that client-go and the Prometheus client, which only the daemon needs, are
// not linked into the manifold plugin, whose start-up every pod waits for;
// `manifold daemon` runs it.
package main

import (
	"os"
	"runtime"

	"github.com/manifold-cni/manifold/daemon"
)

func init() {
	// As in the plugin: namespace switches happen on the current OS thread.
	runtime.LockOSThread()
}

func main() {
	os.Exit(daemon.Run(os.Args[1:]))
}
