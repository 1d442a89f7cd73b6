package main

// The devices section (docs/devices.md): what asking the kubelet which
// devices a pod has costs an ADD. The same pod shape, with one network whose
// NAD names a device-plugin resource against one whose NAD names none, in
// thin and thick mode, the kubelet being podresourcestest's fake served over
// its real gRPC API on a unix socket.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// benchResource is the device-plugin resource of the devices section.
const benchResource = "bench.manifold.io/netdev"

// runDevices runs the with/without loop (withWithout) for a network whose
// NAD names a device-plugin resource, against one whose NAD names none.
func runDevices(b *bench, s settings, r *report) error {
	keys, err := b.deviceKeys("devices")
	if err != nil {
		return err
	}
	if err := b.macvlanNADs("bench-dev", 1, map[string]string{"k8s.v1.cni.cncf.io/resourceName": benchResource}); err != nil {
		return err
	}
	pods := map[bool]*podSpec{}
	for _, with := range []bool{true, false} {
		name := map[bool]string{true: "bench-dev-with", false: "bench-dev-without"}[with]
		p, err := b.createPod("devices-"+name, kindReal, 1)
		if err == nil {
			err = b.setNetworks(p, name)
		}
		if err != nil {
			return err
		}
		pods[with] = p
	}
	calls, err := b.fakeKubelet(keys, pods[true], podresourcestest.Container{Name: "pause",
		Devices: []podresourcestest.Device{{Resource: benchResource, ID: "0000:3b:02.1"}}})
	if err != nil {
		return err
	}
	modes, err := b.deviceModes("devices", keys)
	if err != nil {
		return err
	}
	return b.withWithout(r, "devices", s.deviceIterations, s.warmup, pods, modes, calls, "Devices: ADD of a network that draws a device from the kubelet, against one that does not",
		"ADD wall time of a pod with the default network (bridge) and one macvlan NAD that names a device-plugin resource, against the same pod whose NAD names none; the kubelet is podresourcestest's fake on a unix socket; thin mode asks it through `manifold-daemon pod-devices`, thick mode in the daemon")
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
		if err := b.createNAD(namespace, name, conf, annotations, false); err != nil {
			return err
		}
		annotations = nil
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
	arm, err := b.sectionDaemon(section, b.manifold, cniDir, "--pod-resources-socket", keys["podResourcesSocket"].(string),
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
// counts the kubelet's calls so far. It reports them as section.
func (b *bench) withWithout(r *report, section string, iterations, warmup int, pods map[bool]*podSpec, modes []benchMode, calls func() int, title, note string) error {
	type devCase struct {
		benchMode
		pod   *podSpec
		netns string
	}
	var arms []string
	cases := map[string]devCase{}
	for _, m := range modes {
		for _, with := range []bool{true, false} {
			ns, err := b.newNetNS()
			if err != nil {
				return err
			}
			arm := m.name + map[bool]string{true: " with", false: " without"}[with]
			arms, cases[arm] = append(arms, arm), devCase{m, pods[with], ns.Path()}
		}
	}
	logf("%s: thin and thick, a network with and without a device, %d iterations", section, iterations)
	kubelet := map[string]int{}
	st, err := b.trial(arms, warmup, iterations).run(func(it int, arm string, rec record) error {
		c := cases[arm]
		sb := b.newSandbox(c.pod, c.netns)
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		before := calls()
		start := time.Now()
		err := cniCall(ctx, c.rt, c.conf, "ADD", sb)
		rec("", time.Since(start))
		if it >= warmup {
			kubelet[arm] += calls() - before
		}
		if err == nil {
			err = cniCall(ctx, c.rt, c.conf, "DEL", sb)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var rows []obj
	var lines []string
	for _, m := range modes {
		with, without := m.name+" with", m.name+" without"
		cost := st.diff(with, without).P50
		perAdd := func(arm string) float64 { return float64(kubelet[arm]) / float64(iterations) }
		rows = append(rows, obj{{"mode", m.name}, {"add_with_device", st.dist(with)}, {"add_without_device", st.dist(without)},
			{"cost_p50_ms", cost}, {"kubelet_calls_per_add_with_device", perAdd(with)}, {"kubelet_calls_per_add_without_device", perAdd(without)}})
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%.1f\t%.2f / %.2f\t", m.name, pp(st.dist(with)), pp(st.dist(without)), cost, perAdd(with), perAdd(without)))
	}
	r.set(section, obj{{"title", title}, {"iterations", iterations}, {"note", note}, {"modes", rows}})
	w := r.out(section)
	fmt.Fprintf(w, "\n%s (real delegates, %d iterations), ms p50 / p99\n", title, iterations)
	table(w, true, "mode\twith device\twithout\tcost p50\tkubelet calls per ADD (with / without)\t", lines)
	return nil
}
