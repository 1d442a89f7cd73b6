// Command manifold is the CNI meta-plugin: the container runtime calls it as the
// node's only CNI plugin, and it calls the delegate plugins for every network a
// pod asks for.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

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
	// daemon is run as "manifold daemon".
	if len(os.Args) > 1 && os.Args[1] == "daemon" {
		os.Exit(execDaemon(os.Args[2:]))
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

// execDaemon replaces this process with manifold-daemon, the node daemon,
// found next to this binary. The daemon links client-go and the Prometheus
// client; the plugin does not, so that their start-up cost is not paid by
// every CNI call (docs/hotplug.md).
func execDaemon(args []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifold daemon: find this binary: %v\n", err)
		return 1
	}
	bin := filepath.Join(filepath.Dir(self), "manifold-daemon")
	err = syscall.Exec(bin, append([]string{bin}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "manifold daemon: run %s: %v\n", bin, err)
	return 1
}
