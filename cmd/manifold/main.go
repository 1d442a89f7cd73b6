// Command manifold is the CNI meta-plugin: the container runtime calls it as the
// node's only CNI plugin, and it calls the delegate plugins for every network a
// pod asks for.
package main

import (
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
	// Nothing needs main's goroutine on the main thread any more (the
	// default-route change enters the pod's netns on a goroutine of its own,
	// delegate.inNetNS); unlocking it in the daemon measured no gain
	// (docs/performance.md, "Not done"), so the plugin was left as it was.
	runtime.LockOSThread()
}

func main() {
	// The runtime runs a CNI plugin with no arguments; "manifold daemon"
	// is thick mode's node daemon, a binary of its own beside this one, and
	// "manifold validate" and "manifold webhook" are its subcommands
	// (docs/validation.md), which need what the plugin does not link.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "daemon":
			os.Exit(runDaemon(os.Args[2:]))
		case "validate", "webhook":
			os.Exit(runDaemon(os.Args[1:]))
		}
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

// runDaemon becomes manifold-daemon from this binary's directory, with
// args: `manifold daemon` is how the DaemonSets and the docs start the
// daemon. It returns only if that cannot be done.
func runDaemon(args []string) int {
	what := "manifold " + os.Args[1] + ": "
	self, err := os.Executable()
	if err != nil {
		os.Stderr.WriteString(what + "find manifold-daemon: " + err.Error() + "\n")
		return 1
	}
	bin := filepath.Join(filepath.Dir(self), "manifold-daemon")
	err = syscall.Exec(bin, append([]string{bin}, args...), os.Environ())
	os.Stderr.WriteString(what + "run " + bin + ": " + err.Error() + "\n")
	return 1
}
