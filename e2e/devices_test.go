package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/devinfo"
	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// There is no SR-IOV hardware here, so every layer around it is real: NADs
// with k8s.v1.cni.cncf.io/resourceName on the real API server, a kubelet's
// PodResources API served from its own Go types over gRPC on a unix socket
// (podresourcestest), the device plugin's Device Info files on disk, and the
// recorder test plugin, chained after a real macvlan, in place of sriov-cni:
// it records what it was given (deviceID, pciBusID, runtimeConfig) and can
// write the Device Info file itself.

const (
	resVF  = "intel.com/sriov_vf"
	resNIC = "mellanox.com/cx5"
)

// deviceEnv is an env with a fake kubelet, a Device Info dir, and a way to
// run each case in thin and in thick mode.
type deviceEnv struct {
	*env
	checkpoint string
	infoDir    string
	recordDir  string
}

func newDeviceEnv(t *testing.T) *deviceEnv {
	t.Helper()
	e := &deviceEnv{env: newEnv(t), checkpoint: filepath.Join(t.TempDir(), "checkpoint"), infoDir: t.TempDir(), recordDir: t.TempDir()}
	return e
}

// keys are manifold's config keys that point at the fake kubelet.
func (e *deviceEnv) keys(socket string) map[string]any {
	return map[string]any{"podResourcesSocket": socket, "deviceCheckpoint": e.checkpoint, "deviceInfoDir": e.infoDir}
}

// vfNAD creates a NAD of resource res (none when ""): a macvlan on the env's
// parent, then a recorder that declares the deviceID and CNIDeviceInfoFile
// capabilities, then (with twoRecorders) another that declares none.
func (e *deviceEnv) vfNAD(name, res string, s subnet, twoRecorders bool) {
	e.t.Helper()
	plugins := []string{
		fmt.Sprintf(`{"type":"macvlan","master":%q,"mode":"bridge","ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, e.parent, s, e.leaseDir),
		fmt.Sprintf(`{"type":"recorder","recordDir":%q,"capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}`, filepath.Join(e.recordDir, name)),
	}
	if twoRecorders {
		plugins = append(plugins, fmt.Sprintf(`{"type":"recorder","recordDir":%q}`, filepath.Join(e.recordDir, name+"-plain")))
	}
	for _, d := range []string{name, name + "-plain"} {
		if err := os.MkdirAll(filepath.Join(e.recordDir, d), 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	var annotations map[string]string
	if res != "" {
		annotations = map[string]string{"k8s.v1.cni.cncf.io/resourceName": res}
	}
	e.annotatedNAD(e.ns, name, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[%s]}`, name, strings.Join(plugins, ",")), annotations)
}

// devicePluginFile writes the device plugin's Device Info file for id.
func (e *deviceEnv) devicePluginFile(res, id string) string {
	e.t.Helper()
	path, err := devinfo.Dir{Base: e.infoDir}.DevicePluginPath(res, id)
	if err != nil {
		e.t.Fatal(err)
	}
	doc := fmt.Sprintf(`{"type":"pci","version":"1.1.0","pci":{"pci-address":%q}}`, id)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return doc
}

// recorded is what a recorder of NAD name saw on its ADD as ifname.
func (e *deviceEnv) recorded(dir, ifname string) (stdin map[string]any) {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.recordDir, dir, "ADD-"+ifname+".json"))
	if err != nil {
		e.t.Fatalf("recorder of %s: %v", dir, err)
	}
	var rec struct {
		Stdin map[string]any `json:"stdin"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		e.t.Fatal(err)
	}
	return rec.Stdin
}

// infoFiles lists the attachments' Device Info files.
func (e *deviceEnv) infoFiles() []string {
	entries, _ := os.ReadDir(filepath.Join(e.infoDir, "cni"))
	var out []string
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}

// kubeletPod serves p's devices: each container one device of each resource
// given, in the order given.
func kubeletPod(p *corev1.Pod, devices ...podresourcestest.Device) podresourcestest.Pod {
	return podresourcestest.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		Containers: []podresourcestest.Container{{Name: "c", Devices: devices}}}
}

// mode is thin (the manifold binary) or thick (manifold-shim and a daemon
// whose flags fix the same paths): setup returns the runtime's config and
// the runtime for a kubelet on socket.
type mode struct {
	name  string
	setup func(t *testing.T, e *deviceEnv, socket string) (*libcni.NetworkConfigList, *testenv.Runtime)
}

var deviceModes = []mode{
	{"thin", func(t *testing.T, e *deviceEnv, socket string) (*libcni.NetworkConfigList, *testenv.Runtime) {
		return e.manifoldConf(e.keys(socket)), e.rt
	}},
	{"thick", func(t *testing.T, e *deviceEnv, socket string) (*libcni.NetworkConfigList, *testenv.Runtime) {
		th := &thickEnv{env: e.env, thick: testenv.NewRuntime(t, testenv.ThickBinDir(t, false))}
		th.daemon = testenv.StartDaemon(t, testenv.Manifold(t), "--bin-dir", th.thick.BinDir, "--cni-dir", e.cniDir,
			"--conf-dir", e.confDir, "--kubeconfig", e.cp.KubeconfigPath, "--log-file", e.logFile,
			"--pod-resources-socket", socket, "--device-checkpoint", e.checkpoint, "--device-info-dir", e.infoDir)
		th.socket = th.daemon.Socket
		return th.thickConf(e.keys(socket)), th.thick
	}},
}

// TestDevices: networks whose NADs name a device-plugin resource get the
// devices the kubelet allocated to the pod, in attachment order and sorted,
// as every plugin's deviceID and pciBusID and, for plugins that declare the
// capabilities, runtimeConfig.deviceID and CNIDeviceInfoFile; the device
// plugin's Device Info file becomes the attachment's, shows in
// network-status, and is gone after DEL, which asks the kubelet nothing; a pod
// with more such networks than devices fails with code 7 and a Warning; a
// rate-limited kubelet is waited for; with no socket, the kubelet's
// checkpoint answers. In thin and in thick mode.
func TestDevices(t *testing.T) {
	top := newDeviceEnv(t)
	sa, sb, sc, sd := nextSubnet(), nextSubnet(), nextSubnet(), nextSubnet()
	top.vfNAD("vf-a", resVF, sa, true)
	top.vfNAD("vf-b", resVF, sb, false)
	top.vfNAD("nic", resNIC, sc, false)
	top.vfNAD("plain", "", sd, false)
	vfDocs := map[string]string{"0000:03:02.1": top.devicePluginFile(resVF, "0000:03:02.1"), "0000:03:02.2": top.devicePluginFile(resVF, "0000:03:02.2")}
	sub := func(t *testing.T) *deviceEnv {
		return &deviceEnv{env: top.sub(t), checkpoint: top.checkpoint, infoDir: top.infoDir, recordDir: top.recordDir}
	}

	for _, m := range deviceModes {
		t.Run(m.name+"/two networks on one resource, one on another", func(t *testing.T) {
			e := sub(t)
			pod := e.pod(e.ns, map[string]string{annotNetworks: "vf-a, nic, vf-b, plain"})
			// Served unsorted, and over two NUMA nodes.
			kubelet := podresourcestest.Start(t, kubeletPod(pod, podresourcestest.Device{Resource: resVF, ID: "0000:03:02.2", NUMA: 1},
				podresourcestest.Device{Resource: resNIC, ID: "mlx-7"}, podresourcestest.Device{Resource: resVF, ID: "0000:03:02.1"}))
			conf, rt := m.setup(t, e, kubelet.Socket)
			sb := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			for _, c := range []struct{ dir, ifname, device string }{
				{"vf-a", "net1", "0000:03:02.1"}, {"vf-a-plain", "net1", "0000:03:02.1"}, {"nic", "net2", "mlx-7"}, {"vf-b", "net3", "0000:03:02.2"},
			} {
				in := e.recorded(c.dir, c.ifname)
				if in["deviceID"] != c.device || in["pciBusID"] != c.device {
					t.Errorf("%s on %s: deviceID %v, pciBusID %v; want %s", c.dir, c.ifname, in["deviceID"], in["pciBusID"], c.device)
				}
				rc, _ := in["runtimeConfig"].(map[string]any)
				if strings.HasSuffix(c.dir, "-plain") {
					if len(rc) != 0 {
						t.Errorf("%s declares no capability but got runtimeConfig %v", c.dir, rc)
					}
					continue
				}
				if rc["deviceID"] != c.device || !strings.Contains(fmt.Sprint(rc["CNIDeviceInfoFile"]), "_"+c.ifname) {
					t.Errorf("%s on %s: runtimeConfig %v", c.dir, c.ifname, rc)
				}
			}
			if in := e.recorded("plain", "net4"); in["deviceID"] != nil {
				t.Errorf("a network with no resource got deviceID %v", in["deviceID"])
			}
			// In thick mode the daemon writes the status just after it answers.
			st := e.waitForStatus(pod)
			infos := map[string]string{}
			for _, s := range st {
				infos[s.Interface] = string(s.DeviceInfo)
			}
			for ifname, id := range map[string]string{"net1": "0000:03:02.1", "net3": "0000:03:02.2"} {
				var got, want bytes.Buffer
				_ = json.Compact(&got, []byte(infos[ifname]))
				_ = json.Compact(&want, []byte(vfDocs[id]))
				if got.String() != want.String() {
					t.Errorf("network-status device-info of %s = %s, want the device plugin's %s", ifname, got.String(), want.String())
				}
			}
			if infos["net2"] != "" || infos["net4"] != "" {
				t.Errorf("device-info where the device plugin wrote no file: net2 %q, net4 %q", infos["net2"], infos["net4"])
			}
			if len(e.infoFiles()) == 0 {
				t.Error("no Device Info file of the attachments after ADD")
			}
			kubelet.Stop() // DEL asks the kubelet nothing
			if err := rt.Del(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatalf("DEL with the kubelet stopped: %v", err)
			}
			e.checkNothingLeft(sb)
			if got := e.infoFiles(); len(got) != 0 {
				t.Errorf("Device Info files left after DEL: %v", got)
			}
		})

		t.Run(m.name+"/more networks than devices", func(t *testing.T) {
			e := sub(t)
			pod := e.pod(e.ns, map[string]string{annotNetworks: "vf-a, vf-b"})
			kubelet := podresourcestest.Start(t, kubeletPod(pod, podresourcestest.Device{Resource: resVF, ID: "0000:03:02.1"}))
			conf, rt := m.setup(t, e, kubelet.Socket)
			sb := e.sandboxFor(pod)
			_, err := rt.Add(e.ctx(), conf, sb.Pod)
			wantCode(t, err, 7, resVF, "2 network(s)", "the kubelet gave it 1 device-plugin device(s)", e.ns+"/"+pod.Name)
			e.checkRefused(sb, resVF)
		})

		t.Run(m.name+"/explicit deviceID, rate-limited kubelet", func(t *testing.T) {
			e := sub(t)
			pod := e.pod(e.ns, map[string]string{annotNetworks: `[{"name":"vf-a","deviceID":"0000:03:02.2"},{"name":"vf-b"}]`})
			kubelet := podresourcestest.Start(t, kubeletPod(pod, podresourcestest.Device{Resource: resVF, ID: "0000:03:02.1"},
				podresourcestest.Device{Resource: resVF, ID: "0000:03:02.2"}))
			kubelet.ExhaustFirst(3)
			conf, rt := m.setup(t, e, kubelet.Socket)
			sb := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatalf("ADD past a rate-limited kubelet: %v", err)
			}
			if kubelet.Rejected() != 3 {
				t.Errorf("the kubelet refused %d calls, want 3", kubelet.Rejected())
			}
			if d := e.recorded("vf-a", "net1")["deviceID"]; d != "0000:03:02.2" {
				t.Errorf("vf-a asked for 0000:03:02.2 and got %v", d)
			}
			if d := e.recorded("vf-b", "net2")["deviceID"]; d != "0000:03:02.1" {
				t.Errorf("vf-b got %v, want the device vf-a left, 0000:03:02.1", d)
			}
			if err := rt.Del(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatal(err)
			}
			e.checkNothingLeft(sb)
		})

		t.Run(m.name+"/no socket: the checkpoint", func(t *testing.T) {
			e := sub(t)
			pod := e.pod(e.ns, map[string]string{annotNetworks: "nic"})
			podresourcestest.WriteCheckpoint(t, e.checkpoint, podresourcestest.CheckpointNUMA, kubeletPod(pod, podresourcestest.Device{Resource: resNIC, ID: "mlx-3"}))
			conf, rt := m.setup(t, e, filepath.Join(t.TempDir(), "absent.sock"))
			sb := e.sandboxFor(pod)
			if _, err := rt.Add(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatalf("ADD from the checkpoint: %v", err)
			}
			if d := e.recorded("nic", "net1")["deviceID"]; d != "mlx-3" {
				t.Errorf("nic got %v from the checkpoint, want mlx-3", d)
			}
			if err := rt.Del(e.ctx(), conf, sb.Pod); err != nil {
				t.Fatal(err)
			}
			e.checkNothingLeft(sb)
		})
	}
	if got := top.infoFiles(); len(got) != 0 {
		t.Errorf("Device Info files left: %v", got)
	}
}
