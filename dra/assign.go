package dra

import (
	"fmt"
	"slices"
	"strings"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// Device is what a network was given: the device, and how its plugins are
// told of it.
type Device struct {
	netconf.ClaimDevice
	// DeviceID is the network's deviceID: runtimeConfig.deviceID, and the
	// "deviceID" key of its plugins unless the NAD's device keys say
	// otherwise.
	DeviceID string
	// Keys are the top-level keys every plugin of the network gets.
	Keys map[string]any
	// None is set for a Request.Unlisted that the pod's DRA devices do
	// not serve either: the network gets no device.
	None bool
}

// candidate is one allocated device of a claim, in the order of the
// claim's allocation results.
type candidate struct {
	claim  *Claim
	result k8sclient.AllocationResult
	taken  bool
}

// Kubelet gives the kubelet's view of the pod's claims (for their CDI
// names); Assign calls it at most once, and only when a device has no
// attribute that names it: in thin mode the question costs a process.
type Kubelet func() ([]KubeletClaim, error)

// Assign gives each request one device of the claim (and request) it
// names, or one of the pod's devices by attribute (byattr.go), distinct
// devices for distinct requests:
//   - a request with an explicit deviceID first, which must be one of the
//     devices it names (its deviceID as manifold hands it, or its DRA name):
//     a pod's author cannot reach a device of another pod this way;
//   - then the requests that name a request of a claim, then those that
//     name a whole claim, then those by attribute, each group in attachment
//     order, so that a broad request never takes the device a narrow one
//     needed;
//   - each takes the first free device in the order of the claim's
//     allocation results, which every reader of the claim agrees on; by
//     attribute, in the order of their deviceIDs.
//
// claims maps each ResourceClaim's name to it: those the requests name,
// and all of the pod's when one draws by attribute (Pod.ClaimsToRead).
// Devices allocated with adminAccess are nobody's to move, and are never
// given. Too few devices, an unknown device, or an attribute the device
// keys name that the device lacks, are code-7 errors naming the networks;
// kubelet's error is returned as it is.
func Assign(pod *Pod, reqs []Request, claims map[string]*Claim, slices *Slices, kubelet Kubelet) ([]Device, error) {
	a := &assigner{pod: pod, slices: slices, kubelet: kubelet, pools: map[string][]*candidate{}, byAttr: map[string][]*candidate{}}
	for i := range pod.Claims { // each claim's name in the pod
		if c := claims[pod.Claims[i].ClaimName]; c != nil && c.PodClaim == "" {
			c.PodClaim = pod.Claims[i].Name
		}
	}
	for _, name := range a.claimOrder(claims) {
		for _, res := range claims[name].RC.Status.Allocation.Devices.Results {
			if res.AdminAccess != nil && *res.AdminAccess {
				continue
			}
			a.pools[name] = append(a.pools[name], &candidate{claim: claims[name], result: res})
		}
	}
	out := make([]Device, len(reqs))
	names := make([]string, len(reqs)) // "" for a request by attribute
	for i := range reqs {
		name, byAttr, err := pod.Target(&reqs[i])
		if err != nil {
			return nil, err
		}
		if !byAttr && claims[name] == nil {
			return nil, netconf.Invalid("network %s: ResourceClaim %s/%s was not read", &reqs[i], pod.Namespace, name)
		}
		names[i] = name
	}
	for _, i := range assignOrder(reqs, names) {
		r := &reqs[i]
		pool, err := a.pool(r, names[i])
		if err != nil {
			return nil, err
		}
		var picked *candidate
		for _, cand := range pool {
			if cand.taken || (names[i] != "" && !matchesRequest(cand.result.Request, r.Ref.Request)) {
				continue
			}
			if r.DeviceID != "" && r.DeviceID != cand.result.Device {
				id, err := a.handedID(cand, r.Keys)
				if err != nil {
					return nil, err
				}
				if id != r.DeviceID {
					continue
				}
			}
			picked = cand
			break
		}
		if picked == nil && names[i] == "" && r.Unlisted && len(pool) == 0 {
			out[i] = Device{None: true}
			continue
		}
		if picked == nil {
			if names[i] == "" {
				return nil, a.attrShortage(reqs, i, names)
			}
			return nil, a.shortage(reqs, i, names)
		}
		picked.taken = true
		d, err := a.describe(picked, r)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// assigner is one Assign: what it knows of devices, the candidates of each
// claim and of each resourceName, and the kubelet's answer once asked.
type assigner struct {
	pod     *Pod
	slices  *Slices
	kubelet Kubelet
	order   []string                // the claims, in the pod's order
	pools   map[string][]*candidate // by ResourceClaim name
	byAttr  map[string][]*candidate // by resourceName, built when first drawn from
	cdi     map[string][]string     // by claim ns/name and device; nil until asked
}

// pool is what r draws from: its claim's devices, or the pod's devices of
// its resourceName.
func (a *assigner) pool(r *Request, claim string) ([]*candidate, error) {
	if claim != "" {
		return a.pools[claim], nil
	}
	return a.attrPool(r.Attr)
}

// assignOrder is the order in which requests pick: explicit devices, then
// named requests, then whole claims, then by attribute, each in attachment
// order. names[i] is "" for a request by attribute.
func assignOrder(reqs []Request, names []string) []int {
	rank := func(i int) int {
		switch {
		case reqs[i].DeviceID != "":
			return 0
		case names[i] == "":
			return 3
		case reqs[i].Ref.Request != "":
			return 1
		}
		return 2
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return rank(x) - rank(y) })
	return order
}

// matchesRequest reports whether an allocation result's request is the one
// named: equal, or a subrequest of it ("vf" names "vf/fast").
func matchesRequest(result, named string) bool {
	return named == "" || result == named || strings.HasPrefix(result, named+"/")
}

// shortage explains why request i found no device: the pod's networks that
// draw from the same claim and request, and the devices allocated for them.
func (a *assigner) shortage(reqs []Request, i int, names []string) error {
	pod, r := a.pod, &reqs[i]
	var drawing []string
	for j := range reqs {
		if names[j] == names[i] && reqs[j].Ref.Request == r.Ref.Request {
			drawing = append(drawing, reqs[j].String())
		}
	}
	var devs []string
	for _, cand := range a.pools[names[i]] {
		if matchesRequest(cand.result.Request, r.Ref.Request) {
			devs = append(devs, cand.result.Device)
		}
	}
	what := fmt.Sprintf("claim %q", r.Ref.Claim)
	if r.Ref.Request != "" {
		what = fmt.Sprintf("request %q of claim %q", r.Ref.Request, r.Ref.Claim)
	}
	if r.DeviceID != "" {
		return netconf.Invalid("network %s: deviceID %q is not one of the devices of %s of pod %s/%s (ResourceClaim %s: %s), or another network took it", r, r.DeviceID, what, pod.Namespace, pod.Name, names[i], strings.Join(devs, ", "))
	}
	return netconf.Invalid("%s of pod %s/%s (ResourceClaim %s): %d network(s) draw a device from it (%s), and it was allocated %d (%s); ask for as many devices in the claim as networks name it",
		what, pod.Namespace, pod.Name, names[i], len(drawing), strings.Join(drawing, ", "), len(devs), strings.Join(devs, ", "))
}

// describe makes the Device of cand for r: the record's identity of it, its
// deviceID, and its plugin keys.
func (a *assigner) describe(cand *candidate, r *Request) (Device, error) {
	res := cand.result
	d := Device{ClaimDevice: netconf.ClaimDevice{
		Namespace: cand.claim.RC.Metadata.Namespace, Name: cand.claim.RC.Metadata.Name, UID: cand.claim.RC.Metadata.UID,
		PodClaim: cand.claim.PodClaim, Request: res.Request, Driver: res.Driver, Pool: res.Pool, Device: res.Device,
	}}
	if res.ShareID != nil {
		d.ShareID = *res.ShareID
	}
	attrs, _ := a.slices.Attributes(res.Driver, res.Pool, res.Device)
	if v, ok := attrs[AttrPCIBusID].Value().(string); ok {
		d.PCIBusID = v
	}
	var err error
	if d.DeviceID, err = a.handedID(cand, r.Keys); err != nil {
		return Device{}, err
	}
	if r.Keys == nil {
		d.Keys = map[string]any{"deviceID": d.DeviceID}
		if d.PCIBusID != "" {
			d.Keys["pciBusID"] = d.PCIBusID
		}
		return d, nil
	}
	d.Keys = make(map[string]any, len(r.Keys))
	for _, key := range sortedKeys(r.Keys) {
		name := qualifiedName(res.Driver, r.Keys[key])
		v := attrs[name].Value()
		if v == nil {
			return Device{}, netconf.Invalid("network %s: device %s (claim %q) has no attribute %s in its ResourceSlice, which the NAD's %s maps to %q (it has: %s)",
				r, d.ID(), cand.claim.PodClaim, name, netconf.AnnotDeviceKeys, key, strings.Join(sortedKeys(attrs), ", "))
		}
		d.Keys[key] = v
	}
	return d, nil
}

// handedID is the deviceID a device is handed as: what the NAD's device
// keys map to "deviceID"; else the device's k8s.cni.cncf.io/deviceID
// attribute; its standard PCI address; the name of its first CDI device
// after the "=" (what Multus v4.3.0 passes), which only the kubelet knows;
// or its name in the pool.
func (a *assigner) handedID(cand *candidate, keys map[string]string) (string, error) {
	res := cand.result
	attrs, _ := a.slices.Attributes(res.Driver, res.Pool, res.Device)
	if attr, ok := keys["deviceID"]; ok {
		if v, ok := attrs[qualifiedName(res.Driver, attr)].Value().(string); ok && v != "" {
			return v, nil
		}
	}
	for _, name := range []string{AttrCNIDeviceID, AttrPCIBusID} {
		if v, ok := attrs[name].Value().(string); ok && v != "" {
			return v, nil
		}
	}
	if a.cdi == nil && a.kubelet != nil {
		claims, err := a.kubelet()
		if err != nil {
			return "", err
		}
		a.cdi = cdiNames(claims)
	}
	key := cand.claim.RC.Metadata.Namespace + "/" + cand.claim.RC.Metadata.Name + "/" + res.Driver + "/" + res.Pool + "/" + res.Device
	for _, name := range a.cdi[key] {
		if _, id, ok := strings.Cut(name, "="); ok && id != "" {
			return id, nil
		}
	}
	return res.Device, nil
}

// cdiNames indexes the kubelet's CDI names by claim and device.
func cdiNames(kubelet []KubeletClaim) map[string][]string {
	out := map[string][]string{}
	for _, c := range kubelet {
		for _, d := range c.Devices {
			key := c.Namespace + "/" + c.Name + "/" + d.Driver + "/" + d.Pool + "/" + d.Device
			out[key] = append(out[key], d.CDIDevices...)
		}
	}
	return out
}
