// Command manifold-daemon is thick mode's node daemon (docs/thick-mode.md):
// the socket server that manifold-shim calls, the pod watch and hot-plug
// (docs/hotplug.md), and the daemon's metrics; `manifold daemon` runs it. It
// is a binary of its own so that what only the daemon needs (client-go, the
// Prometheus client, gRPC for the kubelet's PodResources API) is not linked
// into the manifold plugin, whose start-up every CNI call pays.
//
// `manifold-daemon pod-devices ...` answers one query for a pod's devices,
// which the thin plugin runs for a pod that draws one (docs/devices.md).
//
// `manifold-daemon validate ...` (`manifold validate`) checks manifests
// offline, as ADD would, and `manifold-daemon webhook ...` (`manifold
// webhook`) is the validating admission webhook (docs/validation.md).
package main

import (
	"os"
	"runtime"

	"github.com/manifold-cni/manifold/admission"
	"github.com/manifold-cni/manifold/daemon"
	"github.com/manifold-cni/manifold/podresources"
	"github.com/manifold-cni/manifold/webhook"
)

func init() {
	// Nothing needs this any more (delegate.inNetNS enters a pod's netns on a
	// goroutine of its own); unlocking it measured no gain (docs/performance.md,
	// "Not done").
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pod-devices" {
		os.Exit(podresources.RunQuery(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "validate" {
		os.Exit(admission.RunValidate(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "webhook" {
		os.Exit(webhook.Run(os.Args[2:], os.Stderr))
	}
	os.Exit(daemon.Run(os.Args[1:]))
}
