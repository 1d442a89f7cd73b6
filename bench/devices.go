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

// devicesResult is the devices section, and the DRA section.
type devicesResult struct {
	Title      string        `json:"title"`
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

// devices runs the with/without loop (withWithout) for a network whose NAD
// names a device-plugin resource, against one whose NAD names none.
func (b *bench) devices(iterations, warmup int) (*devicesResult, error) {
	keys, err := b.deviceKeys("devices")
	if err != nil {
		return nil, err
	}
	if err := b.macvlanNADs("bench-dev", 1, map[string]string{"k8s.v1.cni.cncf.io/resourceName": benchResource}); err != nil {
		return nil, err
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
	calls, err := b.fakeKubelet(keys, pods[true], podresourcestest.Container{Name: "pause",
		Devices: []podresourcestest.Device{{Resource: benchResource, ID: "0000:3b:02.1"}}})
	if err != nil {
		return nil, err
	}
	modes, err := b.deviceModes("devices", keys)
	if err != nil {
		return nil, err
	}
	out := &devicesResult{Iterations: iterations, Title: "Devices: ADD of a network that draws a device from the kubelet, against one that does not",
		Note: "ADD wall time of a pod with the default network (bridge) and one macvlan NAD that names a device-plugin resource, against the same pod whose NAD names none; the kubelet is podresourcestest's fake on a unix socket; thin mode asks it through `manifold-daemon pod-devices`, thick mode in the daemon"}
	out.Modes, err = b.withWithout("devices", iterations, warmup, pods, modes, calls)
	return out, err
}

// deviceKeys makes a section's dir and returns manifold's device keys for
// it: its fake kubelet's socket, a checkpoint that is absent (the socket
// answers), its Device Info dir.
func (b *bench) deviceKeys(section string) (map[string]any, error) {
	dir := filepath.Join(b.dir, section)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return map[string]any{
		"podResourcesSocket": filepath.Join(dir, "kubelet.sock"),
		"deviceCheckpoint":   filepath.Join(dir, "kubelet_internal_checkpoint"),
		"deviceInfoDir":      filepath.Join(dir, "devinfo"),
	}, nil
}

// macvlanNADs makes NADs <prefix>-with, whose annotations say what it draws
// a device from, and <prefix>-without, which draws none: macvlan with
// host-local, each on its own /24 from 10.252.<subnet>.0.
func (b *bench) macvlanNADs(prefix string, subnet int, annotations map[string]string) error {
	for i, name := range []string{prefix + "-with", prefix + "-without"} {
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"macvlan","master":%q,"mode":"bridge",`+
			`"ipam":{"type":"host-local","subnet":"10.252.%d.0/24","dataDir":%q}}]}`, name, b.parent, subnet+i, b.leaseDir)
		obj, err := nadv1.New(namespace, name, conf).ToUnstructured()
		if err != nil {
			return err
		}
		if i == 0 {
			obj.SetAnnotations(annotations)
		}
		if _, err := b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(namespace).Create(b.ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NAD %s: %w", name, err)
		}
	}
	return nil
}

// fakeKubelet serves p's container on the keys' socket, and returns the
// count of the kubelet's Get and List calls so far.
func (b *bench) fakeKubelet(keys map[string]any, p *podSpec, ctr podresourcestest.Container) (func() int, error) {
	kubelet, err := podresourcestest.Serve(keys["podResourcesSocket"].(string), podresourcestest.Pod{
		Namespace: p.Obj.Namespace, Name: p.Obj.Name, UID: string(p.Obj.UID), Containers: []podresourcestest.Container{ctr}})
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: %w", err)
	}
	b.onCleanup(kubelet.Stop)
	return func() int {
		return kubelet.Calls(podresourcestest.MethodGet) + kubelet.Calls(podresourcestest.MethodList)
	}, nil
}

// deviceModes are thin mode (the plugin with the device keys) and thick
// mode (a daemon of the section's own, whose flags fix the same paths).
func (b *bench) deviceModes(section string, keys map[string]any) ([]benchMode, error) {
	thin, err := withKeys(b.confs[armManifold+"/"+kindReal], keys)
	if err != nil {
		return nil, err
	}
	cniDir := filepath.Join(b.dir, section+"-cni")
	arm, err := b.sectionDaemon(section, cniDir, "--pod-resources-socket", keys["podResourcesSocket"].(string),
		"--device-checkpoint", keys["deviceCheckpoint"].(string), "--device-info-dir", keys["deviceInfoDir"].(string))
	if err != nil {
		return nil, err
	}
	thick, err := b.thickConfList(kindReal, arm)
	if err != nil {
		return nil, err
	}
	thickKeys := map[string]any{"cniDir": cniDir}
	for k, v := range keys {
		thickKeys[k] = v
	}
	if thick, err = withKeys(thick, thickKeys); err != nil {
		return nil, err
	}
	return []benchMode{{"thin", b.runtime, thin}, {"thick", arm.runtime, thick}}, nil
}

// benchMode is thin or thick mode: the runtime and manifold's config.
type benchMode struct {
	name string
	rt   *libcni.CNIConfig
	conf *libcni.NetworkConfigList
}

// withWithout runs iterations interleaved iterations of an ADD (then DEL)
// in each mode of pods[true], whose network draws a device, and of
// pods[false], whose network draws none, in an order that turns; calls
// counts the kubelet's calls so far.
func (b *bench) withWithout(section string, iterations, warmup int, pods map[bool]*podSpec, modes []benchMode, calls func() int) ([]*devicesRow, error) {
	type devCase struct {
		benchMode
		with  bool
		netns string
		adds  []time.Duration
		calls int
	}
	var cases []*devCase
	for _, m := range modes {
		for _, with := range []bool{true, false} {
			ns, err := b.newNetNS()
			if err != nil {
				return nil, err
			}
			cases = append(cases, &devCase{benchMode: m, with: with, netns: ns.Path()})
		}
	}
	logf("%s: thin and thick, a network with and without a device, %d iterations", section, iterations)
	for i := 0; i < warmup+iterations; i++ {
		for j := range cases {
			c := cases[(i+j)%len(cases)]
			sb := b.newSandbox(pods[c.with], c.netns)
			rc := &libcni.RuntimeConf{ContainerID: sb.ContainerID, NetNS: sb.NetNS, IfName: "eth0", Args: sb.args(), CapabilityArgs: sb.capabilityArgs()}
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			before := calls()
			start := time.Now()
			_, err := c.rt.AddNetworkList(ctx, c.conf, rc)
			took := time.Since(start)
			n := calls() - before
			if err == nil {
				err = c.rt.DelNetworkList(ctx, c.conf, rc)
			}
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s ADD/DEL of %s: %w", c.name, sb.Pod.Obj.Name, err)
			}
			if i >= warmup {
				c.adds = append(c.adds, took)
				c.calls += n
			}
		}
	}
	var rows []*devicesRow
	for k := 0; k < len(cases); k += 2 {
		with, without := cases[k], cases[k+1]
		diffs := make([]float64, len(with.adds))
		for i := range with.adds {
			diffs[i] = ms(with.adds[i] - without.adds[i])
		}
		rows = append(rows, &devicesRow{
			Mode: with.name, WithDevice: summarize(with.adds), WithoutDevice: summarize(without.adds),
			CostP50:             summarizeMS(diffs).P50,
			KubeletCallsWith:    float64(with.calls) / float64(iterations),
			KubeletCallsWithout: float64(without.calls) / float64(iterations),
		})
	}
	return rows, nil
}

// print writes the section's table; nothing when it did not run.
func (r *devicesResult) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\n%s (real delegates, %d iterations), ms p50 / p99\n", r.Title, r.Iterations)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\twith device\twithout\tcost p50\tkubelet calls per ADD (with / without)\t")
	for _, m := range r.Modes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.2f / %.2f\t\n", m.Mode, pp(m.WithDevice), pp(m.WithoutDevice), m.CostP50, m.KubeletCallsWith, m.KubeletCallsWithout)
	}
	tw.Flush()
}
