// Package dradriver is a small Dynamic Resource Allocation driver for the
// tests that run a real kubelet: a kubelet plugin on
// k8s.io/dynamic-resource-allocation/kubeletplugin that publishes a
// ResourceSlice of stand-in NICs for its node, and prepares the ones a claim
// was allocated.
//
// There is no NIC hardware here, so each stand-in is one end of a veth pair
// made on the host (the other end stays there). Each device says which
// interface it is by the attribute "ifName", and has a made-up PCI address
// in the standard resource.kubernetes.io/pciBusID, so that a network can
// hand its plugin the interface (host-device's "device") and network-status
// shows a device. As the SR-IOV DRA driver does in its MULTUS mode, every
// device has its PCI address as k8s.cni.cncf.io/deviceID, and those given a
// resource name (Options.ResourceNames) have it as
// k8s.cni.cncf.io/resourceName, which a NAD's resourceName matches.
// Preparing a claim checks that its NICs are on the host,
// where host-device finds them, and remembers the claim.
package dradriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// AttrIfName is the attribute (in the driver's domain) that names a NIC's
// host interface.
const AttrIfName = "ifName"

// Options say where the driver runs.
type Options struct {
	// Driver is the driver's name, a DNS subdomain.
	Driver string
	// NodeName is the kubelet's node, whose pool the driver publishes.
	NodeName string
	// Client writes the ResourceSlices.
	Client kubernetes.Interface
	// KubeletRootDir is the kubelet's --root-dir: the driver registers in
	// its plugins_registry.
	KubeletRootDir string
	// DataDir holds the driver's socket; it is made if missing. A unix
	// socket's path must fit in 108 bytes: keep it short.
	DataDir string
	// NICs is how many stand-in NICs to make, and Prefix starts their
	// host interface names (at most 11 characters: the names get up to 3
	// digits and a peer suffix).
	NICs   int
	Prefix string
	// ResourceNames are the k8s.cni.cncf.io/resourceName of the NICs, in
	// order; a NIC past its end, or given "", has none.
	ResourceNames []string
}

// NIC is one stand-in NIC.
type NIC struct {
	// Device is its name in the pool, IfName its host interface, Peer the
	// veth end that stays on the host, PCIBusID its made-up address,
	// ResourceName its k8s.cni.cncf.io/resourceName ("" for none).
	Device, IfName, Peer, PCIBusID, ResourceName string
}

// Driver is a running driver.
type Driver struct {
	NICs []NIC

	opts   Options
	helper *kubeletplugin.Helper

	mu         sync.Mutex
	prepared   map[types.UID][]string // claim UID -> devices
	unprepared map[types.UID]bool
	errs       []error
}

// Start makes the NICs, registers the driver with the kubelet and
// publishes the pool. Stop undoes it all.
func Start(ctx context.Context, o Options) (*Driver, error) {
	if len(o.Prefix) > 11 {
		return nil, fmt.Errorf("NIC prefix %q is longer than 11 characters", o.Prefix)
	}
	d := &Driver{opts: o, prepared: map[types.UID][]string{}, unprepared: map[types.UID]bool{}}
	for i := range o.NICs {
		n := NIC{Device: fmt.Sprintf("nic-%d", i), IfName: fmt.Sprintf("%s%d", o.Prefix, i), Peer: fmt.Sprintf("%s%dp", o.Prefix, i),
			PCIBusID: fmt.Sprintf("0000:7f:%02x.0", i)}
		if i < len(o.ResourceNames) {
			n.ResourceName = o.ResourceNames[i]
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.IfName}, PeerName: n.Peer}
		if err := netlink.LinkAdd(veth); err != nil {
			d.Stop()
			return nil, fmt.Errorf("make stand-in NIC %s: %w", n.IfName, err)
		}
		d.NICs = append(d.NICs, n)
	}
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		d.Stop()
		return nil, err
	}
	registry := filepath.Join(o.KubeletRootDir, "plugins_registry")
	if err := os.MkdirAll(registry, 0o750); err != nil {
		d.Stop()
		return nil, err
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(o.Driver),
		kubeletplugin.KubeClient(o.Client),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.RegistrarDirectoryPath(registry),
		// The kubelet's root dir of a test is deep; the default name,
		// <driver>-reg.sock, can make the path longer than a unix socket's
		// 108 bytes.
		kubeletplugin.RegistrarSocketFilename("dra-reg.sock"),
		kubeletplugin.PluginDataDirectoryPath(o.DataDir))
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("start DRA driver %s: %w", o.Driver, err)
	}
	d.helper = h
	devices := make([]resourceapi.Device, 0, len(d.NICs))
	for _, n := range d.NICs {
		ifName, pci, res := n.IfName, n.PCIBusID, n.ResourceName
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrIfName:                        {StringValue: &ifName},
			"resource.kubernetes.io/pciBusID": {StringValue: &pci},
			"k8s.cni.cncf.io/deviceID":        {StringValue: &pci},
		}
		if res != "" {
			attrs["k8s.cni.cncf.io/resourceName"] = resourceapi.DeviceAttribute{StringValue: &res}
		}
		devices = append(devices, resourceapi.Device{Name: n.Device, Attributes: attrs})
	}
	if err := h.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		o.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		d.Stop()
		return nil, fmt.Errorf("publish the NICs of %s: %w", o.Driver, err)
	}
	return d, nil
}

// Stop unregisters the driver, deletes its ResourceSlices and the NICs'
// host ends (a NIC still in a pod goes with the pod's netns).
func (d *Driver) Stop() {
	d.helper.Stop()
	if d.opts.Client != nil {
		ctx := context.Background()
		_ = d.opts.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + d.opts.Driver})
	}
	for _, n := range d.NICs {
		for _, name := range []string{n.IfName, n.Peer} {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}
}

// Prepared reports the devices each claim (by UID) was prepared with, and
// whether it was unprepared since.
func (d *Driver) Prepared(claim types.UID) (devices []string, unprepared bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.prepared[claim]...), d.unprepared[claim]
}

// Errors are the errors the driver was told of or met.
func (d *Driver) Errors() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.errs...)
}

// PrepareResourceClaims prepares the driver's devices of each claim: each
// must be one of its NICs, on the host.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var res kubeletplugin.PrepareResult
		var names []string
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.opts.Driver {
				continue
			}
			nic := d.nic(r.Device)
			switch {
			case nic == nil:
				res.Err = fmt.Errorf("claim %s/%s: device %s is not one of driver %s's", c.Namespace, c.Name, r.Device, d.opts.Driver)
			case !onHost(nic.IfName):
				res.Err = fmt.Errorf("claim %s/%s: NIC %s (%s) is not on the host", c.Namespace, c.Name, r.Device, nic.IfName)
			}
			if res.Err != nil {
				break
			}
			names = append(names, r.Device)
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
		}
		d.mu.Lock()
		if res.Err != nil {
			d.errs = append(d.errs, res.Err)
		} else {
			d.prepared[c.UID] = names
		}
		d.mu.Unlock()
		out[c.UID] = res
	}
	return out, nil
}

// UnprepareResourceClaims has nothing to undo: a NIC is given back to the
// host by the network plugin that took it.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claims {
		d.unprepared[c.UID] = true
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError keeps what the kubelet plugin library reports.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, fmt.Errorf("%s: %w", msg, err))
}

func (d *Driver) nic(device string) *NIC {
	for i := range d.NICs {
		if d.NICs[i].Device == device {
			return &d.NICs[i]
		}
	}
	return nil
}

func onHost(ifName string) bool {
	_, err := netlink.LinkByName(ifName)
	return err == nil || !errors.As(err, &netlink.LinkNotFoundError{})
}
