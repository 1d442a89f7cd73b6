package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/manifold-cni/manifold/devinfo"
	"github.com/manifold-cni/manifold/netconf"
)

// PodDevices returns the devices the kubelet allocated to a pod, by
// resource, each list sorted, and where the answer came from (for the log).
// The daemon asks in-process (podresources.Client); the thin plugin runs
// `manifold-daemon pod-devices` (execPodDevices), so that its own binary
// does not link gRPC, whose start-up every call would pay.
type PodDevices func(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (devices map[string][]string, source string, err error)

// SetPodDevices replaces how the plugin asks the kubelet for a pod's devices.
func (p *Plugin) SetPodDevices(f PodDevices) { p.devices = f }

// Capabilities under which a device reaches the plugins that declare them
// (the CNI conventions), besides the top-level keys every plugin gets.
const (
	capDeviceInfoFile = "CNIDeviceInfoFile"
)

// assignDevices gives each network that draws from a device-plugin resource
// (its NAD's k8s.v1.cni.cncf.io/resourceName) one of the devices the kubelet
// allocated to the pod for that resource, in attachment order: the default
// and cluster networks first, then the annotation's order. An explicit
// deviceID in the network's selection wins and is taken out of the pool; it
// must be one of the pod's own devices of that resource, or a pod's author
// could move another pod's device into theirs. A pod with no such network
// asks the kubelet nothing; one with any asks once.
//
// Every plugin of such a network gets the device as top-level "deviceID" and
// "pciBusID" (sriov-cni reads the one, host-device the other), and
// runtimeConfig.deviceID where a plugin declares the capability. Every network
// with a device, or whose plugins declare CNIDeviceInfoFile, gets the path of
// its Device Info file in runtimeConfig.CNIDeviceInfoFile, and the record
// keeps it, so that DEL removes the file without asking anyone.
func (p *Plugin) assignDevices(ctx context.Context, c *call, atts []netconf.Attachment) error {
	var wanted []string // the resources that some network draws from
	for i := range atts {
		if atts[i].Resource != "" && !slices.Contains(wanted, atts[i].Resource) {
			wanted = append(wanted, atts[i].Resource)
		}
	}
	var pools map[string][]string
	if len(wanted) > 0 {
		var err error
		if pools, err = p.podDevices(ctx, c); err != nil {
			return err
		}
		if pools == nil {
			pools = map[string][]string{}
		}
		for i := range atts { // an explicit device is nobody else's
			a := &atts[i]
			if a.Resource == "" || a.DeviceID == "" {
				continue
			}
			if !slices.Contains(pools[a.Resource], a.DeviceID) {
				return netconf.Invalid("network %s: deviceID %q is not one of the pod's devices of resource %q (%s)", a.DisplayName(), a.DeviceID, a.Resource, strings.Join(pools[a.Resource], ", "))
			}
			pools[a.Resource] = slices.DeleteFunc(pools[a.Resource], func(id string) bool { return id == a.DeviceID })
		}
		for _, res := range wanted {
			n := 0
			for i := range atts {
				if atts[i].Resource == res && atts[i].DeviceID == "" {
					n++
				}
			}
			if have := len(pools[res]); have < n {
				return netconf.Invalid("resource %q: %d network(s) of the pod draw a device from it (%s), and the kubelet allocated the pod %d more of it; request as many devices of %s in the pod's resources as networks name it",
					res, n, drawingNetworks(atts, res), have, res)
			}
		}
	}
	for i := range atts {
		a := &atts[i]
		if a.Resource != "" && a.DeviceID == "" {
			a.DeviceID, pools[a.Resource] = pools[a.Resource][0], pools[a.Resource][1:]
		}
		if err := p.handDevice(c, a); err != nil {
			return err
		}
	}
	return nil
}

// handDevice puts att's device, and the path of its Device Info file, where
// its plugins look for them.
func (p *Plugin) handDevice(c *call, att *netconf.Attachment) error {
	if att.Resource != "" && att.DeviceID != "" {
		b, err := netconf.SetPluginKeys(att.Config, map[string]any{"deviceID": att.DeviceID, "pciBusID": att.DeviceID})
		if err != nil {
			return netconf.Invalid("network %s: give it device %s: %v", att.DisplayName(), att.DeviceID, err)
		}
		att.Config = b
		att.RuntimeConfig = withKey(att.RuntimeConfig, netconf.CapDeviceID, att.DeviceID)
	}
	if att.Resource == "" && !att.Capabilities[capDeviceInfoFile] {
		return nil
	}
	path, err := devinfo.Dir{Base: c.conf.DeviceInfoDir}.AttachmentPath(deviceInfoAttachment(c, att))
	if err != nil {
		return netconf.Invalid("network %s: device info file: %v", att.DisplayName(), err)
	}
	att.DeviceInfoFile = path
	att.RuntimeConfig = withKey(att.RuntimeConfig, capDeviceInfoFile, path)
	return nil
}

// podDevices asks the kubelet which devices it allocated to the pod: its
// PodResources API, or, where that socket is absent, its device checkpoint.
// A kubelet that cannot answer in time fails the ADD with code 11, so the
// runtime tries again.
func (p *Plugin) podDevices(ctx context.Context, c *call) (map[string][]string, error) {
	ask := p.devices
	if ask == nil {
		ask = execPodDevices
	}
	devs, src, err := ask(ctx, c.conf, c.pod)
	if err != nil {
		return nil, netconf.TryAgainLater("ask the kubelet for the pod's devices: %v", err)
	}
	c.log.Info("devices from the kubelet", "source", src, "resources", len(devs))
	return devs, nil
}

// execPodDevices runs `manifold-daemon pod-devices` from manifold's own
// directory (where manifold-install puts both) and reads its answer.
func execPodDevices(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (map[string][]string, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find manifold-daemon: %w", err)
	}
	bin := filepath.Join(filepath.Dir(self), "manifold-daemon")
	cmd := exec.CommandContext(ctx, bin, "pod-devices", "--socket", conf.PodResourcesSocket, "--checkpoint", conf.DeviceCheckpoint,
		"--namespace", pod.Namespace, "--name", pod.Name, "--uid", pod.UID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("run %s pod-devices: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	// podresources.Answer, which this package does not import: it links gRPC.
	var a struct {
		Devices map[string][]string `json:"devices"`
		Source  string              `json:"source"`
		Error   string              `json:"error"`
	}
	if err := json.Unmarshal(out, &a); err != nil {
		return nil, "", fmt.Errorf("read the answer of %s pod-devices: %w", bin, err)
	}
	if a.Error != "" {
		return nil, a.Source, errors.New(a.Error)
	}
	return a.Devices, a.Source, nil
}

// copyDeviceInfo is the runner's Prepare: before att's delegate runs, and
// after the record that names its Device Info file is durable, the device
// plugin's file for att's device becomes att's own (the spec's "before ADD").
// A device plugin that writes no file is not an error; a file that cannot be
// copied is logged and the attachment goes on: the device works without it,
// and the delegate may write the file itself.
func copyDeviceInfo(c *call) func(att *netconf.Attachment) {
	return func(att *netconf.Attachment) {
		if att.Resource == "" || att.DeviceID == "" {
			return
		}
		out, err := devinfo.Dir{Base: c.conf.DeviceInfoDir}.Copy(att.Resource, att.DeviceID, deviceInfoAttachment(c, att))
		if err != nil {
			c.log.Warn("device info not copied", "network", att.DisplayName(), "resource", att.Resource, "device", att.DeviceID, "error", err)
			return
		}
		c.log.Debug("device info", "network", att.DisplayName(), "device", att.DeviceID, "outcome", out.String())
	}
}

// deviceInfo is att's Device Info document for network-status, or nil. A file
// that is not a valid document is left out, with a warning: it does not undo
// a working attachment.
func deviceInfo(c *call, att *netconf.Attachment) json.RawMessage {
	if att.DeviceInfoFile == "" {
		return nil
	}
	info, err := devinfo.Dir{Base: c.conf.DeviceInfoDir}.Read(deviceInfoAttachment(c, att))
	if err != nil {
		c.log.Warn("device info left out of network-status", "network", att.DisplayName(), "file", att.DeviceInfoFile, "error", err)
		return nil
	}
	if info == nil {
		return nil
	}
	return info.Raw
}

// deviceInfoAttachment names att's Device Info file as Multus does: by the
// network's name as network-status shows it (ns/name for a NAD, with "/"
// written as "-"), the container and the interface.
func deviceInfoAttachment(c *call, att *netconf.Attachment) devinfo.Attachment {
	return devinfo.Attachment{Network: att.DisplayName(), ContainerID: c.args.ContainerID, IfName: att.IfName}
}

// drawingNetworks lists the networks that draw from res, for a message.
func drawingNetworks(atts []netconf.Attachment, res string) string {
	var names []string
	for i := range atts {
		if atts[i].Resource == res {
			names = append(names, atts[i].DisplayName()+" as "+atts[i].IfName)
		}
	}
	return fmt.Sprint(names)
}

// withKey returns m with k set to v, copying m so that an attachment built
// from a shared map does not change another's.
func withKey(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}
