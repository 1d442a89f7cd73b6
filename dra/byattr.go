package dra

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/manifold-cni/manifold/netconf"
)

// A NAD's k8s.v1.cni.cncf.io/resourceName may name DRA devices by their
// attribute, as Multus does after v4.3.0 and the SR-IOV DRA driver
// (k8snetworkplumbingwg/dra-driver-sriov, in its MULTUS mode) expects: a
// device of any of the pod's claims whose AttrCNIResourceName equals the
// name is a device of that resource, and its AttrCNIDeviceID is its
// deviceID. So is a device of the pod's extended-resource claim whose
// request serves an extended resource of that name
// (status.extendedResourceClaimStatus): the scheduler's mapping says so,
// and the device needs no attribute.

// claimOrder lists the claims read in the pod's order (spec.resourceClaims,
// then its extended-resource claim), so that every reader agrees on it;
// a claim the pod does not list comes last, by name.
func (a *assigner) claimOrder(claims map[string]*Claim) []string {
	var order []string
	add := func(name string) {
		if claims[name] != nil && !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	for _, c := range a.pod.Claims {
		add(c.ClaimName)
	}
	if a.pod.Extended != nil {
		add(a.pod.Extended.ClaimName)
	}
	for _, name := range sortedKeys(claims) {
		add(name)
	}
	a.order = order
	return order
}

// attrPool is the pod's devices of resourceName name, in the order of their
// deviceIDs (as Multus sorts them, and as device-plugin devices are
// sorted), ties in the order of the claims and their results.
func (a *assigner) attrPool(name string) ([]*candidate, error) {
	if pool, ok := a.byAttr[name]; ok {
		return pool, nil
	}
	type entry struct {
		cand *candidate
		id   string
	}
	var entries []entry
	for _, claim := range a.order {
		for _, cand := range a.pools[claim] {
			if !a.hasResourceName(cand, name) {
				continue
			}
			id, err := a.handedID(cand, nil)
			if err != nil {
				return nil, err
			}
			entries = append(entries, entry{cand, id})
		}
	}
	slices.SortStableFunc(entries, func(x, y entry) int { return cmp.Compare(x.id, y.id) })
	pool := make([]*candidate, len(entries))
	for i, e := range entries {
		pool[i] = e.cand
	}
	a.byAttr[name] = pool
	return pool, nil
}

// hasResourceName reports whether cand is a device of resource name: by its
// attribute, or as a device the pod's extended-resource claim allocated for
// an extended resource of that name.
func (a *assigner) hasResourceName(cand *candidate, name string) bool {
	res := cand.result
	attrs, _ := a.slices.Attributes(res.Driver, res.Pool, res.Device)
	if v, ok := attrs[AttrCNIResourceName].Value().(string); ok && v == name {
		return true
	}
	ext := a.pod.Extended
	if ext == nil || cand.claim.RC.Metadata.Name != ext.ClaimName {
		return false
	}
	for _, m := range ext.Mappings {
		if m.Resource == name && matchesRequest(res.Request, m.Request) {
			return true
		}
	}
	return false
}

// attrShortage explains why request i, by attribute, found no device.
func (a *assigner) attrShortage(reqs []Request, i int, names []string) error {
	pod, r := a.pod, &reqs[i]
	var devs []string
	for _, cand := range a.byAttr[r.Attr] {
		devs = append(devs, cand.result.Driver+"/"+cand.result.Pool+"/"+cand.result.Device)
	}
	had := fmt.Sprintf("the pod has no DRA device whose %s is %q, nor one its extended-resource claim serves under that name", AttrCNIResourceName, r.Attr)
	if len(devs) > 0 {
		had = fmt.Sprintf("the pod has %d DRA device(s) whose %s is %q, or that its extended-resource claim serves under that name (%s)",
			len(devs), AttrCNIResourceName, r.Attr, strings.Join(devs, ", "))
	}
	if netconf.IsDevicePluginResource(r.Attr) {
		had += fmt.Sprintf("; the kubelet gave it %d device-plugin device(s) of that resource, which other networks took (%s)", len(r.PluginDevices), strings.Join(r.PluginDevices, ", "))
	}
	if r.DeviceID != "" {
		return netconf.Invalid("network %s: deviceID %q is not one of the devices of resourceName %q of pod %s/%s, or another network took it: %s",
			r, r.DeviceID, r.Attr, pod.Namespace, pod.Name, had)
	}
	var drawing []string
	for j := range reqs {
		if names[j] == "" && reqs[j].Attr == r.Attr {
			drawing = append(drawing, reqs[j].String())
		}
	}
	hint := ""
	if !netconf.IsDevicePluginResource(r.Attr) {
		hint = fmt.Sprintf("; nor is it a claim of the pod (its claims: %s)", pod.claimNames())
	}
	// With a domain, the networks that took the kubelet's devices draw too.
	return netconf.Invalid("resourceName %q of pod %s/%s: %d network(s) draw a device of it (%s), and %s%s",
		r.Attr, pod.Namespace, pod.Name, len(drawing)+len(r.PluginDevices), strings.Join(drawing, ", "), had, hint)
}
