package flow

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// drawsClaim reports whether att draws a device that Dynamic Resource
// Allocation gave the pod: its NAD names a claim, in the precise form or in
// Multus's (a resourceName with no domain), or names by its resourceName the
// devices whose attribute says so (a resourceName with a domain, when the
// kubelet's devices of it did not cover the network: left).
func drawsClaim(att *netconf.Attachment, i int, left pluginLeft) bool {
	return att.ResourceClaim != "" || (att.Resource != "" && !netconf.IsDevicePluginResource(att.Resource)) || left.networks[i]
}

// claimRequests lists the networks of atts that draw a DRA device.
func claimRequests(atts []netconf.Attachment, left pluginLeft) ([]dra.Request, error) {
	var out []dra.Request
	for i := range atts {
		a := &atts[i]
		if !drawsClaim(a, i, left) {
			continue
		}
		r := dra.Request{Index: i, Network: a.DisplayName(), IfName: a.IfName, DeviceID: a.DeviceID, Keys: a.DeviceKeys, Unlisted: left.unlisted[i]}
		switch {
		case a.ResourceClaim != "":
			ref, err := netconf.ParseClaimRef(a.ResourceClaim)
			if err != nil {
				return nil, netconf.Invalid("network %s: %v", a.DisplayName(), err)
			}
			r.Ref = ref
		case netconf.IsDevicePluginResource(a.Resource):
			r.Attr, r.PluginDevices = a.Resource, left.taken[a.Resource]
		default:
			r.Ref, r.Multus, r.Attr = netconf.ClaimRef{Claim: a.Resource}, true, a.Resource
		}
		out = append(out, r)
	}
	return out, nil
}

// assignClaims gives each network that draws a DRA device one of the
// devices allocated to the claim it names (dra.Assign), and sets its
// plugins' keys and what the record keeps of the device. It reads what such
// a pod needs and no more, all of it at once where it can: the pod (only
// when its annotations came from the runtime, so that it was not read), the
// ResourceClaims the networks name, and the ResourceSlices of their drivers
// on the node; the kubelet only when a device has no attribute that names
// it. A pod that draws no DRA device reads nothing.
func (p *Plugin) assignClaims(ctx context.Context, c *call, pc *podContext, k *kubelet, atts []netconf.Attachment, left pluginLeft) error {
	err := p.drawClaims(ctx, c, pc, k, atts, left)
	if err != nil && left.kubeletErr != nil {
		// The networks on a device plugin's resource needed the kubelet.
		return netconf.TryAgainLater("%v; and the pod's DRA devices do not serve its networks: %v", left.kubeletErr, err)
	}
	return err
}

// drawClaims is assignClaims, but for the kubelet's error.
func (p *Plugin) drawClaims(ctx context.Context, c *call, pc *podContext, k *kubelet, atts []netconf.Attachment, left pluginLeft) error {
	reqs, err := claimRequests(atts, left)
	if err != nil || len(reqs) == 0 {
		return err
	}
	if pc.api == nil || pc.pod == nil {
		// No DRA device can be looked for: the networks on a resource the
		// kubelet did not list go without one.
		reqs = slices.DeleteFunc(reqs, func(r dra.Request) bool {
			if r.Unlisted {
				noDevice(c, &atts[r.Index])
			}
			return r.Unlisted
		})
		if len(reqs) == 0 {
			return nil
		}
	}
	if pc.api == nil || pc.pod == nil {
		if r := &reqs[0]; r.Ref.Claim == "" {
			return pluginShortage(atts, r)
		}
		return netconf.Invalid("network %s draws a DRA device (%s), and the pod's claims cannot be read: manifold has no API server, or the pod was not found", atts[reqs[0].Index].DisplayName(), deviceSource(&atts[reqs[0].Index]))
	}
	pod, err := p.podClaims(ctx, c, pc, reqs)
	if err != nil {
		return err
	}
	claims, err := readClaims(ctx, pc.api, pod, reqs)
	if err != nil {
		return err
	}
	sl, err := readSlices(ctx, pc.api, claims)
	if err != nil {
		return err
	}
	fromKubelet := func() ([]dra.KubeletClaim, error) {
		a, err := k.ask(ctx)
		if err != nil {
			return nil, err
		}
		return a.Claims, nil
	}
	devs, err := dra.Assign(pod, reqs, claims, sl, fromKubelet)
	if err != nil {
		return err
	}
	for i, d := range devs {
		att := &atts[reqs[i].Index]
		if d.None {
			noDevice(c, att)
			continue
		}
		b, err := netconf.SetPluginKeys(att.Config, d.Keys)
		if err != nil {
			return netconf.Invalid("network %s: give it device %s: %v", att.DisplayName(), d.ID(), err)
		}
		att.Config, att.DeviceID = b, d.DeviceID
		cd := d.ClaimDevice
		att.Claim = &cd
		c.log.Info("DRA device", "network", att.DisplayName(), "claim", cd.ClaimKey(), "request", cd.Request, "device", cd.ID(), "deviceID", d.DeviceID)
	}
	return nil
}

// pluginShortage explains, where no DRA device can be looked for, why r's
// network on a device-plugin resource has no device: the code-7 error of a
// pod with no DRA claims.
func pluginShortage(atts []netconf.Attachment, r *dra.Request) error {
	res, have := r.Attr, r.PluginDevices
	if r.DeviceID != "" {
		return netconf.Invalid("network %s: deviceID %q is not one of the pod's devices of resource %q (%s)", r.Network, r.DeviceID, res, strings.Join(have, ", "))
	}
	n := 0
	for i := range atts {
		if atts[i].Resource == res && atts[i].ResourceClaim == "" {
			n++
		}
	}
	return netconf.Invalid("resource %q: %d network(s) of the pod draw a device from it (%s), and the kubelet allocated the pod %d of it (%s); request as many devices of %s in the pod's resources as networks name it (the pod's DRA devices of that resourceName are looked for only with an API server, and the pod found)",
		res, n, drawingNetworks(atts, res), len(have), strings.Join(have, ", "), res)
}

// podClaims is the pod's claims, each with its ResourceClaim's name, and
// its extended-resource claim. A pod whose annotations came from the
// runtime was not read, and is read now; a pod read from the API server's
// cache that lacks a ResourceClaim's name (its status not yet seen) is read
// again, from etcd, when a network names a claim it does not find, or
// draws by attribute from all of them.
func (p *Plugin) podClaims(ctx context.Context, c *call, pc *podContext, reqs []dra.Request) (*dra.Pod, error) {
	if !pc.podRead {
		pod, err := pc.api.WaitForPod(ctx, c.pod.Namespace, c.pod.Name, c.pod.UID, c.conf.PodWaitTimeout)
		if err != nil {
			return nil, apiError(err)
		}
		if c.pod.UID != "" && pod.UID != c.pod.UID {
			return nil, netconf.Invalid("pod UID from the API (%s) differs from K8S_POD_UID (%s): the pod was replaced", pod.UID, c.pod.UID)
		}
		pc.pod.ResourceClaims, pc.pod.ExtendedClaim, pc.pod.NodeName, pc.podRead = pod.ResourceClaims, pod.ExtendedClaim, pod.NodeName, true
	}
	pod := &dra.Pod{Namespace: pc.pod.Namespace, Name: pc.pod.Name, UID: pc.pod.UID, Claims: pc.pod.ResourceClaims, Extended: pc.pod.ExtendedClaim}
	for i := range reqs {
		if _, byAttr, err := pod.Target(&reqs[i]); err == nil && (!byAttr || !pod.Incomplete()) {
			continue
		}
		fresh, err := pc.api.WaitForPod(ctx, c.pod.Namespace, c.pod.Name, "", c.conf.PodWaitTimeout)
		if err != nil {
			return nil, apiError(err)
		}
		if pod.UID != "" && fresh.UID != pod.UID {
			return nil, netconf.Invalid("pod UID from the API (%s) differs from the one attached (%s): the pod was replaced", fresh.UID, pod.UID)
		}
		pc.pod.ResourceClaims, pc.pod.ExtendedClaim, pc.pod.NodeName = fresh.ResourceClaims, fresh.ExtendedClaim, fresh.NodeName
		pod.Claims, pod.Extended = fresh.ResourceClaims, fresh.ExtendedClaim
		break
	}
	return pod, nil
}

// readClaims reads, all at once, the ResourceClaims that reqs name, and
// checks that each is allocated and reserved for the pod. A claim that does
// not exist is code 7; an API server that cannot be reached, code 11.
func readClaims(ctx context.Context, api podAPI, pod *dra.Pod, reqs []dra.Request) (map[string]*dra.Claim, error) {
	names, err := pod.ClaimsToRead(reqs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*dra.Claim, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			rc, err := api.GetResourceClaim(ctx, pod.Namespace, name)
			if errors.Is(err, k8sclient.ErrNotFound) {
				errs[i] = netconf.Invalid("ResourceClaim %s/%s of pod %s/%s not found", pod.Namespace, name, pod.Namespace, pod.Name)
				return
			}
			if err != nil {
				errs[i] = apiError(err)
				return
			}
			mu.Lock()
			out[name] = &dra.Claim{RC: rc}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := firstCNIError(errs); err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := out[name].Check(pod); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// firstCNIError is the first of errs that is set: each carries its own CNI
// code, which a join would lose.
func firstCNIError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readSlices reads, one list per driver at once, the ResourceSlices that
// describe the claims' devices: only the node's (the API server indexes
// slices by node) when every device of the driver is allocated on one node,
// as node-local devices are; every slice of the driver otherwise (a device
// that several nodes reach is published with no node name).
func readSlices(ctx context.Context, api podAPI, claims map[string]*dra.Claim) (*dra.Slices, error) {
	type list struct{ driver, node string }
	var lists []list
	perDriver := map[string]string{} // driver -> node, "" for any
	for _, c := range claims {
		node := c.RC.Status.Allocation.NodeName()
		for _, res := range c.RC.Status.Allocation.Devices.Results {
			prev, seen := perDriver[res.Driver]
			if !seen {
				perDriver[res.Driver] = node
			} else if prev != node {
				perDriver[res.Driver] = ""
			}
		}
	}
	for driver, node := range perDriver {
		lists = append(lists, list{driver, node})
	}
	got := make([][]k8sclient.ResourceSlice, len(lists))
	errs := make([]error, len(lists))
	var wg sync.WaitGroup
	for i, l := range lists {
		wg.Go(func() {
			got[i], errs[i] = api.ListResourceSlices(ctx, l.driver, l.node)
			if errs[i] != nil {
				errs[i] = apiError(errs[i])
			}
		})
	}
	wg.Wait()
	if err := firstCNIError(errs); err != nil {
		return nil, err
	}
	var all []k8sclient.ResourceSlice
	for _, g := range got {
		all = append(all, g...)
	}
	return dra.NewSlices(all), nil
}
