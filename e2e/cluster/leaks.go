package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

// HeldBy lists what the node still holds of the given sandboxes (container
// IDs), while other pods run: their IP leases in the cluster's networks
// (host-local writes the container ID as a lease's first line), manifold's
// records and cache files, containerd's libcni cache entries and Device Info
// files that name them. (Their network namespaces are Reboot's to remove.)
func (c *Cluster) HeldBy(sandboxes map[string]bool) []string {
	names := func(p string) bool {
		for id := range sandboxes {
			if strings.Contains(p, id) {
				return true
			}
		}
		return false
	}
	var out []string
	for _, n := range ownNetworks {
		out = append(out, walkFiles(filepath.Join("/var/lib/cni/networks", n), "IP lease", func(p string) bool {
			if net.ParseIP(filepath.Base(p)) == nil {
				return false
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return false
			}
			first, _, _ := strings.Cut(string(b), "\n")
			return sandboxes[strings.TrimSpace(first)]
		})...)
	}
	out = append(out, walkFiles("/var/lib/cni/manifold", "manifold record, lock or cache file", names)...)
	out = append(out, walkFiles("/var/lib/cni/results", "containerd's libcni cache entry", names)...)
	out = append(out, walkFiles("/run/k8s.cni.cncf.io/devinfo", "Device Info file", names)...)
	return out
}
