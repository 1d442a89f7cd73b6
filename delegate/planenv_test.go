package delegate

import (
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
)

// planEnv holds what libcni's AsEnv builds, entry for entry, whatever the
// process's own environment says of the CNI variables.
func TestPlanEnvIsLibcnis(t *testing.T) {
	t.Setenv("CNI_ARGS", "stale=1")     // set over by the call's
	t.Setenv("CNI_PATH", "/old/bin")    // set over by the call's
	t.Setenv("CNI_NOT_SET", "kept")     // not one of libcni's: kept
	t.Setenv("MANIFOLD_PLANENV", "a=b") // a value with "=" in it
	for _, args := range []*invoke.Args{
		{Command: "ADD", ContainerID: "c1", NetNS: "/var/run/netns/p1", IfName: "net1", Path: "/opt/cni/bin:/usr/lib/cni",
			PluginArgs: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAME", "p1"}, {"K8S_POD_NAMESPACE", "default"}}},
		{Command: "DEL", ContainerID: "c1", IfName: "eth0", Path: "/opt/cni/bin", PluginArgsStr: "K8S_POD_NAME=p1"},
		{Command: "CHECK"},
	} {
		got, want := planEnv(args), sortedEnv(args.AsEnv())
		if !slices.Equal(got, want) {
			t.Errorf("%s: planEnv\n%q\nwant libcni's, sorted\n%q", args.Command, got, want)
		}
	}
}

// A planned call is served by its waiting process when its environment holds
// the same entries in another order, and not when one entry differs.
func TestExecComparesEnvAsSet(t *testing.T) {
	dir, e, a, b := twoCalls(t)
	waitStarted(t, dir, "ADD", "eth0")
	reordered := a
	reordered.Env = slices.Clone(a.Env)
	slices.Reverse(reordered.Env)
	run(t, e, reordered, "config-a")
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 1}) {
		t.Fatalf("stats %+v after the call in another order, want 2 started and 1 used", s)
	}
	waitStarted(t, dir, "ADD", "net1")
	changed := b
	changed.Env = slices.Clone(b.Env)
	changed.Env[len(changed.Env)-1] = "PATH=/sbin"
	run(t, e, changed, "config-b")
	if s := e.Stats(); s != (PrestartStats{Started: 2, Used: 1, Discarded: 1}) {
		t.Errorf("stats %+v after a call with one entry changed, want its waiting process discarded", s)
	}
}
