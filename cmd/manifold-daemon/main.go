// Command manifold-daemon is thick mode's node daemon (docs/thick-mode.md),
// also run as `manifold daemon`. It is a binary of its own so that what only
// the daemon needs (gRPC for the kubelet's PodResources API, and the API
// clients it keeps) is not linked into the manifold plugin, whose start-up
// every CNI call pays.
//
// `manifold-daemon pod-devices ...` answers one query for a pod's devices,
// which the thin plugin runs for a pod that draws one (docs/devices.md).
package main

import (
	"os"

	"github.com/manifold-cni/manifold/daemon"
	"github.com/manifold-cni/manifold/podresources"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pod-devices" {
		os.Exit(podresources.RunQuery(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(daemon.Run(os.Args[1:]))
}
