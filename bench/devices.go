package main

// The devices section (docs/devices.md): what asking the kubelet which
// devices a pod has costs an ADD. The same pod shape, with one network whose
// NAD names a device-plugin resource against one whose NAD names none, in
// thin and thick mode, the kubelet being podresourcestest's fake served over
// its real gRPC API on a unix socket.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/libcni"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/k8sclient/nadv1"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// benchResource is the device-plugin resource of the devices section.
const benchResource = "bench.manifold.io/netdev"

// devicesResult is the devices section.
type devicesResult struct {
	Iterations int           `json:"iterations"`
	Note       string        `json:"note"`
	Modes      []*devicesRow `json:"modes"`
}

type devicesRow struct {
	Mode string `json:"mode"` // thin or thick
	// WithDevice: ADD of the pod whose network draws a device; Without:
	// the same pod shape, its NAD naming no resource.
	WithDevice    dist `json:"add_with_device"`
	WithoutDevice dist `json:"add_without_device"`
	// CostP50 is the median of the per-iteration differences.
	CostP50 float64 `json:"cost_p50_ms"`
	// Kubelet calls (Get and List) per ADD.
	KubeletCallsWith    float64 `json:"kubelet_calls_per_add_with_device"`
	KubeletCallsWithout float64 `json:"kubelet_calls_per_add_without_device"`
}

// devices runs iterations interleaved iterations of four ADDs (then DELs):
// thin and thick, with and without a device, in an order that turns.
func (b *bench) devices(iterations, warmup int) (*devicesResult, error) {
	dir := filepath.Join(b.dir, "devices")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	keys := map[string]any{
		"podResourcesSocket": filepath.Join(dir, "kubelet.sock"),
		"deviceCheckpoint":   filepath.Join(dir, "kubelet_internal_checkpoint"), // absent: the socket answers
		"deviceInfoDir":      filepath.Join(dir, "devinfo"),
	}
	// Both NADs: macvlan with host-local, each on its own /24.
	nads := map[string]string{"bench-dev-with": benchResource, "bench-dev-without": ""}
	subnet := 1
	for name, resource := range nads {
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"macvlan","master":%q,"mode":"bridge",`+
			`"ipam":{"type":"host-local","subnet":"10.252.%d.0/24","dataDir":%q}}]}`, name, b.parent, subnet, b.leaseDir)
		subnet++
		obj, err := nadv1.New(namespace, name, conf).ToUnstructured()
		if err != nil {
			return nil, err
		}
		if resource != "" {
			obj.SetAnnotations(map[string]string{"k8s.v1.cni.cncf.io/resourceName": resource})
		}
		if _, err := b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(namespace).Create(b.ctx, obj, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create NAD %s: %w", name, err)
		}
	}
	pods := map[bool]*podSpec{}
	for _, with := range []bool{true, false} {
		name := map[bool]string{true: "bench-dev-with", false: "bench-dev-without"}[with]
		p, err := b.createPod("devices-"+name, kindReal, 1)
		if err == nil {
			err = b.setNetworks(p, name)
		}
		if err != nil {
			return nil, err
		}
		pods[with] = p
	}
	p := pods[true].Obj
	kubelet, err := podresourcestest.Serve(keys["podResourcesSocket"].(string), podresourcestest.Pod{
		Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		Containers: []podresourcestest.Container{{Name: "pause", Devices: []podresourcestest.Device{{Resource: benchResource, ID: "0000:3b:02.1"}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: %w", err)
	}
	b.onCleanup(kubelet.Stop)
	kubeletCalls := func() int {
		return kubelet.Calls(podresourcestest.MethodGet) + kubelet.Calls(podresourcestest.MethodList)
	}

	thin, err := withKeys(b.confs[armManifold+"/"+kindReal], keys)
	if err != nil {
		return nil, err
	}
	cniDir := filepath.Join(b.dir, "devices-cni")
	arm, err := b.sectionDaemon("devices", cniDir, "--pod-resources-socket", keys["podResourcesSocket"].(string),
		"--device-checkpoint", keys["deviceCheckpoint"].(string), "--device-info-dir", keys["deviceInfoDir"].(string))
	if err != nil {
		return nil, err
	}
	thick, err := b.thickConfList(kindReal, arm)
	if err == nil {
		keys["cniDir"] = cniDir
		thick, err = withKeys(thick, keys)
	}
	if err != nil {
		return nil, err
	}

	type devCase struct {
		mode  string
		with  bool
		rt    *libcni.CNIConfig
		conf  *libcni.NetworkConfigList
		netns string
		adds  []time.Duration
		calls int
	}
	var cases []*devCase
	for _, m := range []struct {
		mode string
		rt   *libcni.CNIConfig
		conf *libcni.NetworkConfigList
	}{{"thin", b.runtime, thin}, {"thick", arm.runtime, thick}} {
		for _, with := range []bool{true, false} {
			ns, err := b.newNetNS()
			if err != nil {
				return nil, err
			}
			cases = append(cases, &devCase{mode: m.mode, with: with, rt: m.rt, conf: m.conf, netns: ns.Path()})
		}
	}
	logf("devices: thin and thick, a network with and without a device, %d iterations", iterations)
	for i := 0; i < warmup+iterations; i++ {
		for j := range cases {
			c := cases[(i+j)%len(cases)]
			sb := b.newSandbox(pods[c.with], c.netns)
			rc := &libcni.RuntimeConf{ContainerID: sb.ContainerID, NetNS: sb.NetNS, IfName: "eth0", Args: sb.args(), CapabilityArgs: sb.capabilityArgs()}
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			before := kubeletCalls()
			start := time.Now()
			_, err := c.rt.AddNetworkList(ctx, c.conf, rc)
			took := time.Since(start)
			calls := kubeletCalls() - before
			if err == nil {
				err = c.rt.DelNetworkList(ctx, c.conf, rc)
			}
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s ADD/DEL of %s: %w", c.mode, sb.Pod.Obj.Name, err)
			}
			if i >= warmup {
				c.adds = append(c.adds, took)
				c.calls += calls
			}
		}
	}
	out := &devicesResult{Iterations: iterations, Note: "ADD wall time of a pod with the default network (bridge) and one macvlan NAD that names a device-plugin resource, against the same pod whose NAD names none; the kubelet is podresourcestest's fake on a unix socket; thin mode asks it through `manifold-daemon pod-devices`, thick mode in the daemon"}
	for k := 0; k < len(cases); k += 2 {
		with, without := cases[k], cases[k+1]
		diffs := make([]float64, len(with.adds))
		for i := range with.adds {
			diffs[i] = ms(with.adds[i] - without.adds[i])
		}
		out.Modes = append(out.Modes, &devicesRow{
			Mode: with.mode, WithDevice: summarize(with.adds), WithoutDevice: summarize(without.adds),
			CostP50:             summarizeMS(diffs).P50,
			KubeletCallsWith:    float64(with.calls) / float64(iterations),
			KubeletCallsWithout: float64(without.calls) / float64(iterations),
		})
	}
	return out, nil
}

// print writes the section's table; nothing when it did not run.
func (r *devicesResult) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nDevices: ADD of a network that draws a device from the kubelet, against one that does not (real delegates, %d iterations), ms p50 / p99\n", r.Iterations)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\twith device\twithout\tcost p50\tkubelet calls per ADD (with / without)\t")
	for _, m := range r.Modes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.2f / %.2f\t\n", m.Mode, pp(m.WithDevice), pp(m.WithoutDevice), m.CostP50, m.KubeletCallsWith, m.KubeletCallsWithout)
	}
	tw.Flush()
}
