package delegate

import (
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
)

// The environment of a planned plugin call, and the form in which two
// environments are compared.
//
// A process started early gets, at its start, the environment that libcni
// will pass for its call; when the call comes, its environment must be that
// one, or the process is not used. libcni builds it with invoke.Args.AsEnv:
// the process's environment with the CNI variables set over it, through a map
// and a fmt.Sprintf of every entry, in the map's order. Built that way for
// each plan, and compared by sorting copies of both sides at each match, it
// took 4-5% of the daemon's CPU (docs/performance-history.md, change 25).

// cniEnvKeys are the variables that invoke.Args.AsEnv sets over the
// process's own.
var cniEnvKeys = [...]string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_ARGS", "CNI_IFNAME", "CNI_PATH"}

// planEnv is the environment that args.AsEnv() builds, as a set, sorted (see
// sortedEnv): os.Environ, without the CNI variables, and then them. It
// holds the same entries as AsEnv's: os.Environ has no key twice (Go's
// syscall package blanks a later duplicate, and Environ skips it), and
// AsEnv's map keeps, of each key, the value it saw last: the CNI variable's.
// An entry without "=" is kept by both.
func planEnv(args *invoke.Args) []string {
	pluginArgs := args.PluginArgsStr
	if pluginArgs == "" {
		parts := make([]string, len(args.PluginArgs))
		for i, kv := range args.PluginArgs {
			parts[i] = kv[0] + "=" + kv[1]
		}
		pluginArgs = strings.Join(parts, ";")
	}
	env := os.Environ()
	env = slices.DeleteFunc(env, isCNIEnv)
	env = append(env,
		"CNI_COMMAND="+args.Command,
		"CNI_CONTAINERID="+args.ContainerID,
		"CNI_NETNS="+args.NetNS,
		"CNI_ARGS="+pluginArgs,
		"CNI_IFNAME="+args.IfName,
		"CNI_PATH="+args.Path,
	)
	slices.Sort(env)
	return env
}

// isCNIEnv reports whether kv sets one of cniEnvKeys.
func isCNIEnv(kv string) bool {
	if !strings.HasPrefix(kv, "CNI_") {
		return false
	}
	key, _, ok := strings.Cut(kv, "=")
	return ok && slices.Contains(cniEnvKeys[:], key)
}

// sortedEnv is env sorted, in a copy: two environments hold the same entries
// when their sorted forms are equal.
func sortedEnv(env []string) []string {
	s := slices.Clone(env)
	slices.Sort(s)
	return s
}
