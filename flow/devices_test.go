package flow

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources"
	"github.com/manifold-cni/manifold/podresources/podresourcestest"
)

// deviceCall is an ADD call of pod default/p (UID u), with its devices
// learnt from kubelet's socket (or, where that is absent, checkpoint).
func deviceCall(t *testing.T, socket, checkpoint string) *call {
	t.Helper()
	conf := parseTestConf(t, map[string]any{"podResourcesSocket": socket, "deviceCheckpoint": checkpoint, "deviceInfoDir": t.TempDir()})
	return &call{conf: conf, args: &skel.CmdArgs{ContainerID: "c1", IfName: "eth0"}, pod: netconf.PodRef{Namespace: "default", Name: "p", UID: "u"},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctx: context.Background()}
}

// netWith is a network from NAD default/<name> that draws from resource; the
// conflist has two plugins, and the second declares CNIDeviceInfoFile.
func netWith(t *testing.T, name, resource, ifname string) netconf.Attachment {
	t.Helper()
	n, err := netconf.ParseNetwork([]byte(`{"cniVersion":"1.0.0","name":"`+name+`","plugins":[{"type":"sriov","deviceID":"stale"},
		{"type":"tuning","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	a := netconf.NewAttachment(n, "default/"+name)
	a.Resource, a.IfName = resource, ifname
	return a
}

// inProcessKubelet asks the kubelet as the daemon does, in-process.
func inProcessKubelet(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (KubeletAnswer, error) {
	c := &podresources.Client{Socket: conf.PodResourcesSocket, Checkpoint: conf.DeviceCheckpoint}
	defer c.Close()
	res, src, err := c.Resources(ctx, podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID})
	return KubeletAnswer{Devices: res.Devices, Claims: res.Claims, Source: string(src)}, err
}

func pluginKeys(t *testing.T, att netconf.Attachment, key string) []string {
	t.Helper()
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(att.Config, &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Plugins {
		s, _ := p[key].(string)
		out = append(out, s)
	}
	return out
}

// TestAssignDevices: networks draw distinct devices from their resources in
// attachment order, whatever order the kubelet lists them in; every plugin
// gets the device as deviceID and pciBusID, the plugins that declare the
// capabilities get runtimeConfig.deviceID and CNIDeviceInfoFile; an explicit
// deviceID wins and is nobody else's; a pod that draws more devices than it
// was given fails with code 7 naming the resource and the counts; a pod that
// draws none asks the kubelet nothing.
func TestAssignDevices(t *testing.T) {
	pod := podresourcestest.Pod{Namespace: "default", Name: "p", UID: "u", Containers: []podresourcestest.Container{
		{Name: "a", Devices: []podresourcestest.Device{{Resource: "intel.com/vf", ID: "0000:03:02.3"}, {Resource: "intel.com/vf", ID: "0000:03:02.1", NUMA: 1}}},
		{Name: "b", Devices: []podresourcestest.Device{{Resource: "intel.com/vf", ID: "0000:03:02.2"}, {Resource: "nvidia.com/nic", ID: "mlx-9"}}},
	}}
	kubelet := podresourcestest.Start(t, pod)
	// In-process, as the daemon asks; the thin plugin's exec of
	// manifold-daemon is e2e TestDevices' "thin" half.
	p := &Plugin{devices: inProcessKubelet}

	t.Run("two networks on one resource, one on another", func(t *testing.T) {
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "plain", "", "eth0"), netWith(t, "a", "intel.com/vf", "net1"),
			netWith(t, "m", "nvidia.com/nic", "net2"), netWith(t, "b", "intel.com/vf", "net3")}
		before := kubelet.Calls(podresourcestest.MethodGet) + kubelet.Calls(podresourcestest.MethodList)
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); err != nil {
			t.Fatal(err)
		}
		if n := kubelet.Calls(podresourcestest.MethodGet) + kubelet.Calls(podresourcestest.MethodList) - before; n != 1 {
			t.Errorf("kubelet calls: %d, want 1 for the whole pod", n)
		}
		for i, want := range []string{"", "0000:03:02.1", "mlx-9", "0000:03:02.2"} {
			a := atts[i]
			if a.DeviceID != want {
				t.Errorf("%s: device %q, want %q", a.DisplayName(), a.DeviceID, want)
			}
			if want == "" {
				// No device; its tuning plugin may still write a Device Info file.
				if pluginKeys(t, a, "deviceID")[0] != "stale" || a.RuntimeConfig[netconf.CapDeviceID] != nil || a.DeviceInfoFile == "" {
					t.Errorf("%s draws no device but got %v / %v, file %q", a.DisplayName(), pluginKeys(t, a, "deviceID"), a.RuntimeConfig, a.DeviceInfoFile)
				}
				continue
			}
			if got := pluginKeys(t, a, "deviceID"); !slices.Equal(got, []string{want, want}) {
				t.Errorf("%s: plugins' deviceID %v, want %s in each", a.DisplayName(), got, want)
			}
			if got := pluginKeys(t, a, "pciBusID"); !slices.Equal(got, []string{want, want}) {
				t.Errorf("%s: plugins' pciBusID %v, want %s in each", a.DisplayName(), got, want)
			}
			if a.RuntimeConfig[netconf.CapDeviceID] != want || a.RuntimeConfig[capDeviceInfoFile] != a.DeviceInfoFile {
				t.Errorf("%s: runtimeConfig %v", a.DisplayName(), a.RuntimeConfig)
			}
			wantFile := filepath.Join(c.conf.DeviceInfoDir, "cni", "default-"+a.Network+"-c1_"+a.IfName)
			if a.DeviceInfoFile != wantFile {
				t.Errorf("%s: device info file %q, want %q", a.DisplayName(), a.DeviceInfoFile, wantFile)
			}
		}
	})

	t.Run("explicit deviceID wins", func(t *testing.T) {
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "a", "intel.com/vf", "net1"), netWith(t, "b", "intel.com/vf", "net2")}
		atts[1].DeviceID = "0000:03:02.1"
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); err != nil {
			t.Fatal(err)
		}
		if atts[0].DeviceID != "0000:03:02.2" || atts[1].DeviceID != "0000:03:02.1" {
			t.Errorf("devices %s, %s; want 0000:03:02.2 (the lowest left) and the explicit 0000:03:02.1", atts[0].DeviceID, atts[1].DeviceID)
		}
	})

	t.Run("explicit deviceID of another pod's device", func(t *testing.T) {
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "a", "intel.com/vf", "net1")}
		atts[0].DeviceID = "0000:03:02.7" // allocated to some other pod
		err := p.assignDevices(context.Background(), c, &podContext{}, atts)
		if netconf.Code(err) != 7 || !strings.Contains(err.Error(), "0000:03:02.7") || !strings.Contains(err.Error(), "not one of the pod's devices") {
			t.Fatalf("error %v, want code 7 naming the device that is not the pod's", err)
		}
	})

	t.Run("more networks than devices", func(t *testing.T) {
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "a", "nvidia.com/nic", "net1"), netWith(t, "b", "nvidia.com/nic", "net2")}
		err := p.assignDevices(context.Background(), c, &podContext{}, atts)
		if netconf.Code(err) != 7 {
			t.Fatalf("error %v, want code 7", err)
		}
		for _, s := range []string{`"nvidia.com/nic"`, "2 network(s)", "allocated the pod 1 of it (mlx-9)", "default/a as net1", "default/b as net2"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	})

	t.Run("no device drawn, no call", func(t *testing.T) {
		c := deviceCall(t, "/nonexistent/kubelet.sock", "/nonexistent/checkpoint")
		atts := []netconf.Attachment{netWith(t, "a", "", "eth0")}
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); err != nil {
			t.Fatalf("a pod that draws no device: %v", err)
		}
		if atts[0].DeviceInfoFile == "" {
			t.Error("a network whose plugin declares CNIDeviceInfoFile got no file to write")
		}
	})

	t.Run("rate-limited kubelet", func(t *testing.T) {
		kubelet.ExhaustFirst(3)
		c := deviceCall(t, kubelet.Socket, "")
		atts := []netconf.Attachment{netWith(t, "a", "nvidia.com/nic", "net1")}
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); err != nil || atts[0].DeviceID != "mlx-9" {
			t.Fatalf("after 3 refusals: %v, device %q", err, atts[0].DeviceID)
		}
	})

	t.Run("no socket: the checkpoint", func(t *testing.T) {
		cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
		podresourcestest.WriteCheckpoint(t, cp, podresourcestest.CheckpointNUMA, pod)
		c := deviceCall(t, filepath.Join(t.TempDir(), "absent.sock"), cp)
		atts := []netconf.Attachment{netWith(t, "a", "intel.com/vf", "net1")}
		if err := p.assignDevices(context.Background(), c, &podContext{}, atts); err != nil || atts[0].DeviceID != "0000:03:02.1" {
			t.Fatalf("from the checkpoint: %v, device %q", err, atts[0].DeviceID)
		}
	})
}
