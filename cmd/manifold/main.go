// Command manifold is the CNI meta-plugin: the container runtime calls it as the
// node's only CNI plugin, and it calls the delegate plugins for every network a
// pod asks for.
package main

import (
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/daemon"
	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/netconf"
)

func init() {
	// Namespace switches (default-route changes) happen on the current OS thread;
	// pinning main's thread keeps the Go runtime from moving us off it.
	runtime.LockOSThread()
}

func main() {
	// The runtime runs a CNI plugin with no arguments; thick mode's node
	// daemon is this binary run as "manifold daemon".
	if len(os.Args) > 1 && os.Args[1] == "daemon" {
		os.Exit(daemon.Run(os.Args[2:]))
	}
	if os.Getenv(netconf.NestedEnv) != "" {
		os.Exit(refuseNested())
	}
	skel.PluginMainFuncs(flow.New().Funcs(), version.All, flow.About())
}

// refuseNested answers a call made by a delegate of manifold (netconf.NestedEnv):
// a network's plugin, or a plugin's IPAM, that turned out to be manifold. Run
// so, manifold would obey the config it was given, written by whoever wrote
// the network, as the node's own (docs/security.md).
func refuseNested() int {
	err := types.NewError(types.ErrInvalidNetworkConfig, "manifold refuses to run as a delegate of manifold ("+netconf.NestedEnv+" is set): a network's plugin or IPAM type named a meta-plugin", "")
	err.Print()
	return 1
}
