// Package dra matches a pod's networks to the devices that Dynamic Resource
// Allocation gave the pod (resource.k8s.io/v1), and says what is written
// back into each ResourceClaim's status.devices (KEP-4817) for a device a
// network attached (docs/devices.md).
//
// It holds no I/O: the flow reads the pod, its ResourceClaims and the
// ResourceSlices of their devices, and asks the kubelet, and gives this
// package what it read.
package dra

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// Standard and conventional device attributes that name a device for a
// delegate.
const (
	// AttrPCIBusID is Kubernetes's standard attribute for a PCI device's
	// address in extended BDF notation ("0000:03:00.1"),
	// k8s.io/dynamic-resource-allocation/deviceattribute's
	// StandardDeviceAttributePCIBusID.
	AttrPCIBusID = "resource.kubernetes.io/pciBusID"
	// AttrCNIDeviceID is the attribute that Multus (after v4.3.0) reads as a
	// DRA device's deviceID.
	AttrCNIDeviceID = "k8s.cni.cncf.io/deviceID"
	// AttrCNIResourceName is the attribute that names a device's resource
	// as a NAD's k8s.v1.cni.cncf.io/resourceName does (Multus after v4.3.0,
	// and the SR-IOV DRA driver in its MULTUS mode publish it).
	AttrCNIResourceName = "k8s.cni.cncf.io/resourceName"
)

// KubeletClaim is a claim as the kubelet's PodResources API reports it
// (DynamicResources): only the claims a container of the pod names in its
// resources.claims, with the devices the driver prepared.
type KubeletClaim struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Devices   []KubeletDevice `json:"devices,omitempty"`
}

// KubeletDevice is one prepared device of a KubeletClaim.
type KubeletDevice struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	// CDIDevices are the device's fully qualified CDI names
	// ("vendor.com/class=name").
	CDIDevices []string `json:"cdiDevices,omitempty"`
}

// Request is one network that draws a DRA device.
type Request struct {
	// Index is the network's position in the pod's attachments.
	Index int
	// Network and IfName name it in messages.
	Network, IfName string
	// Ref is the claim (and request) it names. Multus is set when the name
	// came from k8s.v1.cni.cncf.io/resourceName: it may then also be the
	// name of a ResourceClaim of the pod, as Multus v4.3.0 compares it.
	Ref    netconf.ClaimRef
	Multus bool
	// Attr is the NAD's resourceName when the network may draw a device by
	// its attribute AttrCNIResourceName (byattr.go): always, when Ref names
	// no claim; else only when Ref names no claim of the pod.
	Attr string
	// PluginDevices are the device-plugin devices of Attr that the kubelet
	// gave the pod and other networks took, for messages.
	PluginDevices []string
	// DeviceID is the device the pod's selection asked for; "" for any.
	DeviceID string
	// Keys are the NAD's device keys (netconf.AnnotDeviceKeys); nil for the
	// default ones.
	Keys map[string]string
	// Unlisted is set when the kubelet listed no device of Attr for the pod
	// at all (a resource no device plugin serves): when the pod has no DRA
	// device of it either, the request gets a Device with None set instead
	// of failing, and the network attaches without a device, as under Multus.
	Unlisted bool
}

func (r *Request) String() string { return r.Network + " as " + r.IfName }

// source is how a request names its claim, for messages.
func (r *Request) source() string {
	if r.Multus {
		return fmt.Sprintf("resourceName %q", r.Ref.Claim)
	}
	return fmt.Sprintf("%s %q", netconf.AnnotResourceClaim, r.Ref)
}

// Pod is what the matching knows of the pod: its claims, with the names
// of their ResourceClaims, and the claim made for its extended resources.
type Pod struct {
	Namespace, Name, UID string
	Claims               []k8sclient.PodResourceClaim
	Extended             *k8sclient.ExtendedResourceClaim
}

// Resolve finds the claim of the pod that r names, and returns its name in
// the pod and the name of its ResourceClaim. A name given as resourceName
// is first a claim's name in the pod and else, as Multus v4.3.0 compares
// it, the name of one of the pod's ResourceClaims; a name that is both (of
// two different claims) is refused rather than guessed. Errors have code 7.
func (p *Pod) Resolve(r *Request) (podClaim, claimName string, err error) {
	c, err := p.find(r)
	if err != nil {
		return "", "", err
	}
	if c == nil {
		return "", "", netconf.Invalid("network %s: %s is not a claim of pod %s/%s (its claims: %s)%s", r, r.source(), p.Namespace, p.Name, p.claimNames(), multusHint(r))
	}
	if c.ClaimName == "" {
		return "", "", netconf.Invalid("network %s: claim %q of pod %s/%s has no ResourceClaim", r, c.Name, p.Namespace, p.Name)
	}
	return c.Name, c.ClaimName, nil
}

// Target is what r draws from: the ResourceClaim it names (Resolve), or,
// with byAttr set, any device of the pod by attribute: a request with no
// claim, or whose resourceName names no claim of the pod.
func (p *Pod) Target(r *Request) (claimName string, byAttr bool, err error) {
	if r.Ref.Claim == "" {
		return "", r.Attr != "", nil
	}
	if r.Attr != "" {
		c, err := p.find(r)
		if err != nil {
			return "", false, err
		}
		if c == nil {
			return "", true, nil
		}
	}
	_, name, err := p.Resolve(r)
	return name, false, err
}

// find is the claim of the pod that r names, nil for none.
func (p *Pod) find(r *Request) (*k8sclient.PodResourceClaim, error) {
	var byPod, byObject *k8sclient.PodResourceClaim
	for i := range p.Claims {
		c := &p.Claims[i]
		if c.Name == r.Ref.Claim {
			byPod = c
		}
		if r.Multus && c.ClaimName == r.Ref.Claim {
			byObject = c
		}
	}
	if byPod != nil && byObject != nil && byPod != byObject {
		return nil, netconf.Invalid("network %s: %s names claim %q of the pod and also ResourceClaim %s of its claim %q; name one with %s", r, r.source(), byPod.Name, byObject.ClaimName, byObject.Name, netconf.AnnotResourceClaim)
	}
	if byPod == nil {
		byPod = byObject
	}
	return byPod, nil
}

// ClaimsToRead are the ResourceClaims that reqs draw from, each once: those
// they name and, when one draws by attribute, every ResourceClaim of the
// pod, its extended-resource claim last. Errors have code 7.
func (p *Pod) ClaimsToRead(reqs []Request) ([]string, error) {
	var names []string
	add := func(name string) {
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	anyAttr := false
	for i := range reqs {
		name, byAttr, err := p.Target(&reqs[i])
		if err != nil {
			return nil, err
		}
		anyAttr = anyAttr || byAttr
		add(name)
	}
	if anyAttr {
		for _, c := range p.Claims {
			add(c.ClaimName)
		}
		if p.Extended != nil {
			add(p.Extended.ClaimName)
		}
	}
	return names, nil
}

// Incomplete reports whether a claim of the pod has no ResourceClaim name
// yet: a pod read from the API server's cache before the controller wrote
// its status.
func (p *Pod) Incomplete() bool {
	return slices.ContainsFunc(p.Claims, func(c k8sclient.PodResourceClaim) bool { return c.ClaimName == "" })
}

func multusHint(r *Request) string {
	if !r.Multus {
		return ""
	}
	return "; a device plugin's resource has a domain, like intel.com/sriov_vf"
}

func (p *Pod) claimNames() string {
	if len(p.Claims) == 0 {
		return "none"
	}
	names := make([]string, 0, len(p.Claims))
	for _, c := range p.Claims {
		if c.ClaimName != "" && c.ClaimName != c.Name {
			names = append(names, c.Name+" (ResourceClaim "+c.ClaimName+")")
		} else {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ", ")
}

// Claim is a ResourceClaim the pod draws from, as read from the API.
type Claim struct {
	// PodClaim is its name in the pod.
	PodClaim string
	RC       *k8sclient.ResourceClaim
}

// Check refuses a claim that manifold must not take devices from for pod:
// one that is not allocated, or not reserved for this very pod (a claim of
// its namespace that the pod's spec names, but that the scheduler reserved
// for others). Errors have code 7.
func (c *Claim) Check(pod *Pod) error {
	name := c.RC.Metadata.Namespace + "/" + c.RC.Metadata.Name
	if c.RC.Status.Allocation == nil {
		return netconf.Invalid("ResourceClaim %s (claim %q of pod %s/%s) is not allocated", name, c.PodClaim, pod.Namespace, pod.Name)
	}
	if !c.RC.ReservedForPod(pod.Name, pod.UID) {
		return netconf.Invalid("ResourceClaim %s (claim %q) is not reserved for pod %s/%s", name, c.PodClaim, pod.Namespace, pod.Name)
	}
	return nil
}

// Slices indexes what the ResourceSlices say of devices: their attributes,
// from the newest generation of each pool.
type Slices struct {
	devices map[string]map[string]k8sclient.DeviceAttribute // driver/pool/device
	gen     map[string]int64                                // driver/pool
}

// NewSlices indexes slices. Of a pool published in several generations
// (while its driver updates it), only the newest counts, as for the
// scheduler.
func NewSlices(slices []k8sclient.ResourceSlice) *Slices {
	s := &Slices{devices: map[string]map[string]k8sclient.DeviceAttribute{}, gen: map[string]int64{}}
	for i := range slices {
		sp := &slices[i].Spec
		pool := sp.Driver + "/" + sp.Pool.Name
		if g, ok := s.gen[pool]; ok && g > sp.Pool.Generation {
			continue
		}
		if g, ok := s.gen[pool]; ok && g < sp.Pool.Generation {
			for id := range s.devices {
				if strings.HasPrefix(id, pool+"/") {
					delete(s.devices, id)
				}
			}
		}
		s.gen[pool] = sp.Pool.Generation
		for _, d := range sp.Devices {
			s.devices[pool+"/"+d.Name] = qualify(sp.Driver, d.Attributes)
		}
	}
	return s
}

// Attributes are the device's attributes, each under its qualified name
// (an attribute a slice names without a domain is its driver's), and
// whether any slice has the device.
func (s *Slices) Attributes(driver, pool, device string) (map[string]k8sclient.DeviceAttribute, bool) {
	if s == nil {
		return nil, false
	}
	a, ok := s.devices[driver+"/"+pool+"/"+device]
	return a, ok
}

func qualify(driver string, attrs map[string]k8sclient.DeviceAttribute) map[string]k8sclient.DeviceAttribute {
	out := make(map[string]k8sclient.DeviceAttribute, len(attrs))
	for name, v := range attrs {
		out[qualifiedName(driver, name)] = v
	}
	return out
}

func qualifiedName(driver, name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return driver + "/" + name
}

// sortedKeys lists m's keys in order, for stable messages.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
