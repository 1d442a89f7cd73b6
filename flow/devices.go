package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/manifold-cni/manifold/devinfo"
	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// PodDevices asks the kubelet which devices it allocated to a pod: its
// device-plugin devices by resource, each list sorted, the DRA claims of its
// containers, and where the answer came from (for the log). The daemon asks
// in-process (podresources.Client); the thin plugin runs `manifold-daemon
// pod-devices` (execPodDevices), so that its own binary does not link gRPC,
// whose start-up every call would pay.
type PodDevices func(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (KubeletAnswer, error)

// KubeletAnswer is what the kubelet said of a pod's devices; its JSON is
// podresources.Answer's, which `manifold-daemon pod-devices` prints.
type KubeletAnswer struct {
	Devices map[string][]string `json:"devices,omitempty"`
	Claims  []dra.KubeletClaim  `json:"claims,omitempty"`
	Source  string              `json:"source,omitempty"`
	Error   string              `json:"error,omitempty"`
}

// SetPodDevices replaces how the plugin asks the kubelet for a pod's devices.
func (p *Plugin) SetPodDevices(f PodDevices) { p.devices = f }

// Capabilities under which a device reaches the plugins that declare them
// (the CNI conventions), besides the top-level keys every plugin gets.
const (
	capDeviceInfoFile = "CNIDeviceInfoFile"
)

// kubelet asks the kubelet about the call's pod at most once, when first
// needed: by a network on a device-plugin resource, or by a DRA device that
// only the kubelet's CDI names can name.
type kubelet struct {
	p      *Plugin
	c      *call
	answer *KubeletAnswer
	err    error
}

func (k *kubelet) ask(ctx context.Context) (*KubeletAnswer, error) {
	if k.answer == nil && k.err == nil {
		k.answer, k.err = k.p.podDevices(ctx, k.c)
	}
	return k.answer, k.err
}

// assignDevices gives each network that draws a device its device: one the
// kubelet allocated to the pod for a device-plugin resource (a NAD's
// k8s.v1.cni.cncf.io/resourceName with a domain), or one of the pod's DRA
// devices (assignClaims): of the claim the NAD names, or by its attribute
// k8s.cni.cncf.io/resourceName, which is where a resource's networks that
// the kubelet's devices do not cover look. A pod with no such network asks
// nobody anything. Then every network with a device, or whose plugins
// declare CNIDeviceInfoFile, gets the path of its Device Info file in
// runtimeConfig.CNIDeviceInfoFile, and the record keeps it, so that DEL
// removes the file without asking anyone.
func (p *Plugin) assignDevices(ctx context.Context, c *call, pc *podContext, atts []netconf.Attachment) error {
	k := &kubelet{p: p, c: c}
	left, err := assignPluginDevices(ctx, k, atts)
	if err != nil {
		return err
	}
	if err := p.assignClaims(ctx, c, pc, k, atts, left); err != nil {
		return err
	}
	for i := range atts {
		if err := handDevice(c, &atts[i]); err != nil {
			return err
		}
	}
	return nil
}

// namesPluginResource reports whether att's resourceName may be a device
// plugin's: it has a domain, as every extended resource has.
func namesPluginResource(att *netconf.Attachment) bool {
	return att.Resource != "" && att.ResourceClaim == "" && netconf.IsDevicePluginResource(att.Resource)
}

// drawsPluginDevice reports whether att's device is a device plugin's: its
// resourceName has a domain, and no DRA device was given to it.
func drawsPluginDevice(att *netconf.Attachment) bool {
	return namesPluginResource(att) && att.Claim == nil
}

// pluginLeft are the networks on device-plugin resources that the
// kubelet's devices did not cover (by index in the attachments), and the
// devices of each resource that the others took, for messages.
// kubeletErr is set when the kubelet could not be asked: then every such
// network is left, and the error is the answer unless the pod's DRA
// devices serve them all.
//
// unlisted are the networks of left whose resource the kubelet did not
// list for the pod at all: a resource that no device plugin serves, such as
// the extended resources that KubeVirt's bridge-marker and ovs-cni's marker
// put on the node for the scheduler (bridge.network.kubevirt.io/br1). Where
// the pod's DRA devices hold none of it either, such a network attaches
// without a device, as under Multus; a resource that the kubelet listed,
// but with too few devices, still fails the pod (docs/devices.md).
type pluginLeft struct {
	networks   map[int]bool
	unlisted   map[int]bool
	taken      map[string][]string
	kubeletErr error
}

// assignPluginDevices gives each network that draws from a device-plugin
// resource one of the devices the kubelet allocated to the pod for that
// resource, in attachment order: the default and cluster networks first,
// then the annotation's order. An explicit deviceID in the network's
// selection wins and is taken out of the pool when it is one of the pod's
// own devices of that resource: never another pod's. The networks left
// over (more of them than devices, or an explicit deviceID that is not
// the kubelet's) draw from the pod's DRA devices of that resourceName
// (assignClaims), which fails them if there are none. A kubelet that
// cannot answer leaves them all, with its error.
func assignPluginDevices(ctx context.Context, k *kubelet, atts []netconf.Attachment) (pluginLeft, error) {
	left := pluginLeft{networks: map[int]bool{}, unlisted: map[int]bool{}, taken: map[string][]string{}}
	var wanted []string // the resources that some network draws from
	for i := range atts {
		if namesPluginResource(&atts[i]) && !slices.Contains(wanted, atts[i].Resource) {
			wanted = append(wanted, atts[i].Resource)
		}
	}
	if len(wanted) == 0 {
		return left, nil
	}
	answer, err := k.ask(ctx)
	if err != nil {
		left.kubeletErr = err
		for i := range atts {
			if namesPluginResource(&atts[i]) {
				left.networks[i] = true
			}
		}
		return left, nil
	}
	pools := map[string][]string{}
	for res, ids := range answer.Devices {
		pools[res] = slices.Clone(ids)
	}
	take := func(a *netconf.Attachment, id string) {
		pools[a.Resource] = slices.DeleteFunc(pools[a.Resource], func(d string) bool { return d == id })
		left.taken[a.Resource] = append(left.taken[a.Resource], id)
	}
	for i := range atts { // an explicit device is nobody else's
		a := &atts[i]
		if !namesPluginResource(a) || a.DeviceID == "" {
			continue
		}
		if slices.Contains(pools[a.Resource], a.DeviceID) {
			take(a, a.DeviceID)
		} else {
			left.networks[i] = true
		}
	}
	for i := range atts {
		a := &atts[i]
		if !namesPluginResource(a) || a.DeviceID != "" {
			continue
		}
		if len(pools[a.Resource]) == 0 {
			left.networks[i] = true
			if _, listed := answer.Devices[a.Resource]; !listed {
				left.unlisted[i] = true
			}
			continue
		}
		a.DeviceID = pools[a.Resource][0]
		take(a, a.DeviceID)
	}
	return left, nil
}

// ReasonAttachedWithoutDevice is the reason of the Normal event for a
// network whose NAD names a resource that the kubelet allocated the pod no
// device of (pluginLeft.unlisted).
const ReasonAttachedWithoutDevice = "AttachedWithoutDevice"

// noDevice marks att as attached without a device of its resource, and
// says so in the log; report sends the event.
func noDevice(c *call, att *netconf.Attachment) {
	att.NoDeviceOf = att.Resource
	c.log.Warn("the kubelet lists no device of the network's resource for the pod, nor has the pod a DRA device of it; attaching without a device, as Multus does",
		"network", att.DisplayName(), "resource", att.Resource)
}

// noDeviceMessage is the event's message for att (noDevice).
func noDeviceMessage(att *netconf.Attachment) string {
	return fmt.Sprintf("%s (%s): the kubelet allocated the pod no device of resource %q, which its NAD names in %s; attached without a device",
		att.DisplayName(), att.IfName, att.NoDeviceOf, netconf.AnnotResourceName)
}

// noDeviceEvents sends the Normal event of each network attached without a
// device (noDevice).
func (p *Plugin) noDeviceEvents(ctx context.Context, log *slog.Logger, api podAPI, pod *k8sclient.Pod, atts []netconf.Attachment, wg *sync.WaitGroup) {
	host := hostname()
	for i := range atts {
		if atts[i].NoDeviceOf == "" {
			continue
		}
		msg := noDeviceMessage(&atts[i])
		now := p.now()
		wg.Go(func() {
			if err := api.Event(ctx, pod, k8sclient.EventNormal, ReasonAttachedWithoutDevice, msg, host, now); err != nil {
				log.Warn("send event", "error", err)
			}
		})
	}
}

// handDevice puts att's device, and the path of its Device Info file, where
// its plugins look for them. A device-plugin device is every plugin's
// "deviceID" and "pciBusID" (sriov-cni reads the one, host-device the
// other); a DRA device's keys were set by assignClaims. Both are
// runtimeConfig.deviceID where a plugin declares the capability.
func handDevice(c *call, att *netconf.Attachment) error {
	if drawsPluginDevice(att) && att.DeviceID != "" {
		b, err := netconf.SetPluginKeys(att.Config, map[string]any{"deviceID": att.DeviceID, "pciBusID": att.DeviceID})
		if err != nil {
			return netconf.Invalid("network %s: give it device %s: %v", att.DisplayName(), att.DeviceID, err)
		}
		att.Config = b
	}
	if att.DeviceID != "" && (drawsPluginDevice(att) || att.Claim != nil) {
		att.RuntimeConfig = withKey(att.RuntimeConfig, netconf.CapDeviceID, att.DeviceID)
	}
	if att.Resource == "" && att.Claim == nil && !att.Capabilities[capDeviceInfoFile] {
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
func (p *Plugin) podDevices(ctx context.Context, c *call) (*KubeletAnswer, error) {
	ask := p.devices
	if ask == nil {
		ask = execPodDevices
	}
	a, err := ask(ctx, c.conf, c.pod)
	if err != nil {
		return nil, netconf.TryAgainLater("ask the kubelet for the pod's devices: %v", err)
	}
	c.log.Info("devices from the kubelet", "source", a.Source, "resources", len(a.Devices), "claims", len(a.Claims))
	return &a, nil
}

// execPodDevices runs `manifold-daemon pod-devices` from manifold's own
// directory (where manifold-install puts both) and reads its answer.
func execPodDevices(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (KubeletAnswer, error) {
	self, err := os.Executable()
	if err != nil {
		return KubeletAnswer{}, fmt.Errorf("find manifold-daemon: %w", err)
	}
	bin := filepath.Join(filepath.Dir(self), "manifold-daemon")
	cmd := exec.CommandContext(ctx, bin, "pod-devices", "--socket", conf.PodResourcesSocket, "--checkpoint", conf.DeviceCheckpoint,
		"--namespace", pod.Namespace, "--name", pod.Name, "--uid", pod.UID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return KubeletAnswer{}, fmt.Errorf("run %s pod-devices: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	var a KubeletAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return KubeletAnswer{}, fmt.Errorf("read the answer of %s pod-devices: %w", bin, err)
	}
	if a.Error != "" {
		return KubeletAnswer{Source: a.Source}, errors.New(a.Error)
	}
	return a, nil
}

// prepareDeviceInfo is the runner's Prepare: before att's delegate runs, and
// after the record that names its Device Info file is durable, att's file
// is made (the spec's "before ADD"): a copy of the device plugin's file for
// its device, or, for a DRA device with a standard PCI address, a document
// of that address. A device plugin that writes no file is not an error; a
// file that cannot be made is logged and the attachment goes on: the device
// works without it, and the delegate may write the file itself.
func prepareDeviceInfo(c *call) func(att *netconf.Attachment) {
	return func(att *netconf.Attachment) {
		dir := devinfo.Dir{Base: c.conf.DeviceInfoDir}
		var out devinfo.Outcome
		var err error
		switch {
		case drawsPluginDevice(att) && att.DeviceID != "":
			out, err = dir.Copy(att.Resource, att.DeviceID, deviceInfoAttachment(c, att))
		case att.Claim != nil && att.Resource != "" && att.DeviceID != "" && driverFileFirst(dir, c, att):
			return
		case att.Claim != nil && att.Claim.PCIBusID != "":
			var doc []byte
			if doc, err = devinfo.PCIDocument(att.Claim.PCIBusID); err == nil {
				out, err = dir.Write(doc, deviceInfoAttachment(c, att))
			}
		default:
			return
		}
		if err != nil {
			c.log.Warn("device info not written", "network", att.DisplayName(), "resource", deviceSource(att), "device", att.DeviceID, "error", err)
			return
		}
		c.log.Debug("device info", "network", att.DisplayName(), "device", att.DeviceID, "outcome", out.String())
	}
}

// driverFileFirst copies, for a DRA device drawn by resourceName, the
// Device Info file its driver wrote under that resource and deviceID, as a
// device plugin would (the SR-IOV DRA driver does in its MULTUS mode), and
// reports whether that settled it: false when the driver wrote none.
func driverFileFirst(dir devinfo.Dir, c *call, att *netconf.Attachment) bool {
	out, err := dir.Copy(att.Resource, att.DeviceID, deviceInfoAttachment(c, att))
	if err == nil && out == devinfo.NoDevicePluginFile {
		return false
	}
	if err != nil {
		c.log.Warn("device info not written", "network", att.DisplayName(), "resource", deviceSource(att), "device", att.DeviceID, "error", err)
		return true
	}
	c.log.Debug("device info", "network", att.DisplayName(), "device", att.DeviceID, "outcome", out.String())
	return true
}

// deviceSource names what att draws its device from, for messages.
func deviceSource(att *netconf.Attachment) string {
	switch {
	case drawsPluginDevice(att):
		return fmt.Sprintf("resource %q", att.Resource)
	case att.ResourceClaim != "":
		return fmt.Sprintf("claim %q", att.ResourceClaim)
	case att.Resource != "":
		return fmt.Sprintf("resourceName %q", att.Resource)
	}
	return "none"
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
