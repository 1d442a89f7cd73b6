package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/manifold-cni/manifold/e2e/crinode"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// Leftovers lists what the node still holds of pods that are gone: IP leases
// of the cluster's networks, host ends of pod interfaces on its bridges,
// manifold's records and libcni cache files, containerd's libcni cache
// entries, Device Info files and network namespaces. Call it when the
// cluster has no user pods: everything it finds is a leak.
func (c *Cluster) Leftovers() []string {
	var out []string
	for _, n := range ownNetworks {
		out = append(out, walkFiles(filepath.Join("/var/lib/cni/networks", n), "IP lease", func(p string) bool {
			return net.ParseIP(filepath.Base(p)) != nil
		})...)
	}
	out = append(out, walkFiles("/var/lib/cni/manifold", "manifold record, lock or cache file", nil)...)
	out = append(out, walkFiles("/run/k8s.cni.cncf.io/devinfo", "Device Info file", nil)...)
	results, _ := os.ReadDir("/var/lib/cni/results")
	for _, r := range results {
		if strings.HasPrefix(r.Name(), ManifoldNetwork+"-") || strings.HasPrefix(r.Name(), PrimaryNetwork+"-") {
			out = append(out, "containerd's libcni cache entry: /var/lib/cni/results/"+r.Name())
		}
	}
	for _, b := range ownBridges {
		ports, err := testenv.HostBridgePorts(b)
		if err != nil {
			out = append(out, fmt.Sprintf("list the links on bridge %s: %v", b, err))
		}
		if len(ports) > 0 {
			out = append(out, fmt.Sprintf("host links left on bridge %s: %v", b, ports))
		}
	}
	live := c.liveSandboxInfo()
	for name := range crinode.HostNetNSNames() {
		if !c.netnsBefore[name] && !strings.Contains(live, name) {
			out = append(out, "network namespace left: /var/run/netns/"+name)
		}
	}
	return out
}

// liveSandboxInfo is the verbose status of every ready sandbox, run
// together: a namespace it names is a running pod's, not a leak. (CRI-O
// pins a namespace for a host-network pod too, the DaemonSets' among them:
// the host's, under the name of the pod's other namespaces.)
func (c *Cluster) liveSandboxInfo() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cri := c.Node.CRIClient().Runtime
	list, err := cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, sb := range list.Items {
		st, err := cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id, Verbose: true})
		if err != nil {
			continue
		}
		for _, v := range st.Info {
			b.WriteString(v)
		}
	}
	return b.String()
}

// walkFiles lists the files under dir that keep says are leaks (all when keep
// is nil), each as "<what>: <path>".
func walkFiles(dir, what string, keep func(string) bool) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && (keep == nil || keep(p)) {
			out = append(out, what+": "+p)
		}
		return nil
	})
	return out
}

// The kinds of what a sandbox leaves on the node (HeldKinds).
const (
	HeldLease         = "IP lease"
	HeldRecord        = "manifold record"
	HeldManifoldCache = "manifold's libcni cache entry"
	HeldManifoldOther = "manifold lock or other file"
	HeldRuntimeCache  = "the runtime's libcni cache entry"
	HeldDeviceInfo    = "Device Info file"
)

// HeldBy lists what the node still holds of the given sandboxes (container
// IDs), while other pods run, each as "<kind>: <path>" (HeldKinds).
func (c *Cluster) HeldBy(sandboxes map[string]bool) []string {
	var out []string
	for kind, paths := range c.HeldKinds(sandboxes) {
		for _, p := range paths {
			out = append(out, kind+": "+p)
		}
	}
	sort.Strings(out)
	return out
}

// HeldKinds is what the node still holds of the given sandboxes (container
// IDs), by kind: their IP leases in the cluster's networks (host-local
// writes the container ID as a lease's first line), manifold's records
// (cniDir/<id>), its libcni cache entries (cniDir/results) and other files
// that name them (locks), the runtime's libcni cache entries
// (/var/lib/cni/results) and Device Info files that name them. (Their
// network namespaces are Reboot's to remove.)
func (c *Cluster) HeldKinds(sandboxes map[string]bool) map[string][]string {
	names := func(p string) bool {
		for id := range sandboxes {
			if strings.Contains(filepath.Base(p), id) {
				return true
			}
		}
		return false
	}
	out := map[string][]string{}
	add := func(kind string, found []string) {
		for _, f := range found {
			out[kind] = append(out[kind], strings.TrimPrefix(f, kind+": "))
		}
	}
	for _, n := range ownNetworks {
		add(HeldLease, walkFiles(filepath.Join("/var/lib/cni/networks", n), HeldLease, func(p string) bool {
			if net.ParseIP(filepath.Base(p)) == nil {
				return false
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return false
			}
			first, _, _ := strings.Cut(string(b), "\n")
			return sandboxes[strings.TrimSpace(first)]
		}))
	}
	const cniDir = "/var/lib/cni/manifold"
	for _, f := range walkFiles(cniDir, "", names) {
		p := strings.TrimPrefix(f, ": ")
		switch {
		case filepath.Dir(p) == cniDir && sandboxes[filepath.Base(p)]:
			out[HeldRecord] = append(out[HeldRecord], p)
		case filepath.Dir(p) == filepath.Join(cniDir, "results"):
			out[HeldManifoldCache] = append(out[HeldManifoldCache], p)
		default:
			out[HeldManifoldOther] = append(out[HeldManifoldOther], p)
		}
	}
	add(HeldRuntimeCache, walkFiles("/var/lib/cni/results", HeldRuntimeCache, names))
	add(HeldDeviceInfo, walkFiles("/run/k8s.cni.cncf.io/devinfo", HeldDeviceInfo, names))
	return out
}
