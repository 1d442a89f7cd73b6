package flow

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// One network plugged into, or out of, a running pod on a caller's request:
// the node daemon's answer to Multus's /delegate (docs/hotplug.md, "An
// external controller"), which the multus-dynamic-networks-controller calls.
// It runs through the same steps as the daemon's own hot-plug (Reconcile):
// under the sandbox's lock, written ahead to the record, network-status
// rewritten from the record and an event sent after the step, so that the
// pod's DEL and GC remove what was plugged.

// PlugRequest is one network for PlugOne or UnplugOne.
type PlugRequest struct {
	// ContainerID is the pod sandbox's container ID, whose record the
	// network joins; NetNS is the caller's idea of its netns, which must be
	// the recorded one.
	ContainerID, NetNS string
	// IfName is the interface in the pod. It must be given: an empty one is
	// refused with code 4, as libcni refuses it under Multus's daemon.
	IfName string
	// Pod is the pod the caller means: its namespace, name and, when the
	// caller knows it, UID.
	Pod k8sclient.Pod
	// Config is the network's CNI config (a NAD's spec.config, its name
	// defaulted to the NAD's).
	Config []byte
	// IPs, MAC and CNIArgs are the attachment's requests, as a networks
	// annotation entry would carry them.
	IPs     []string
	MAC     string
	CNIArgs map[string]any
}

// PlugOne attaches req's network to the running container and returns the
// delegate's result. The network is held to the rules of a network from a
// NAD (no meta-plugin, allowedPluginTypes, its plugins found in binDir
// only, the requests checked against its capabilities).
func (p *Plugin) PlugOne(ctx context.Context, req *PlugRequest) (types.Result, error) {
	// Multus's daemon runs /delegate through libcni, whose interface-name
	// check refuses an empty CNI_IFNAME with code 4; the
	// multus-dynamic-networks-controller relies on that refusal to leave a
	// pod alone while an element names no interface. Choosing a free net<i>
	// here made it detach the pod's other networks instead.
	if req.IfName == "" {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("pod %s/%s: CNI_IFNAME is empty: /delegate attaches a network only under the interface name it is given", req.Pod.Namespace, req.Pod.Name), "")
	}
	h, rec, err := p.plugCall(req)
	if err != nil || rec == nil {
		if err == nil {
			err = netconf.Invalid("container %s has no record on this node: manifold did not attach it, or its DEL has run", req.ContainerID)
		}
		return nil, err
	}
	if len(strings.TrimSpace(string(req.Config))) == 0 {
		return nil, netconf.Invalid("pod %s/%s: the request carries no network config", req.Pod.Namespace, req.Pod.Name)
	}
	sel, err := h.selectionFor(ctx, req)
	if err != nil {
		return nil, err
	}
	name := sel.Namespace + "/" + sel.Name
	att, warnings, err := netconf.AttachmentForSelection(sel, string(req.Config), h.conf)
	if err != nil {
		return nil, h.warn(ctx, name, err)
	}
	for _, w := range warnings {
		h.log.Warn(w, "network", name)
	}
	att.Request = netconf.SelectionKey(sel)
	if err := netconf.ValidateIfName(att.IfName); err != nil {
		return nil, h.warn(ctx, name, netconf.Invalid("%v", err))
	}
	var res types.Result
	gone, err := h.step(ctx, p, func(ctx context.Context, ch *delegate.Change) (string, error) {
		r, err := ch.Attach(ctx, att)
		if err != nil {
			return "", h.warn(ctx, att.DisplayName(), err)
		}
		res = r
		var wg sync.WaitGroup
		p.unservedEvents(ctx, h.log, h.api, h.pod, []netconf.Attachment{att}, &wg)
		wg.Wait()
		return fmt.Sprintf("Add %s [%s] from %s", att.IfName, strings.Join(resultIPs(r), ","), att.DisplayName()), nil
	}, "AddedInterface")
	if err == nil && gone {
		err = netconf.Invalid("container %s: its record went away (its DEL ran) before network %s was attached", req.ContainerID, name)
	}
	if err != nil {
		return nil, err
	}
	h.log.Info("PLUG done", "result", "ok", "network", name, delegate.AttachmentIfnameKey, att.IfName)
	return res, nil
}

// UnplugOne detaches the attachment on req.IfName. A container with no
// record, or no attachment on that name, has nothing of it attached: that
// succeeds, as a DEL does. The attachment must be of the network that
// req.Config names, and never the pod's default network.
func (p *Plugin) UnplugOne(ctx context.Context, req *PlugRequest) error {
	h, rec, err := p.plugCall(req)
	if err != nil || rec == nil {
		return err
	}
	i := indexOf(rec.Attachments, req.IfName)
	if req.IfName == "" || i < 0 {
		h.log.Info("UNPLUG: nothing attached on that interface", delegate.AttachmentIfnameKey, req.IfName)
		return nil
	}
	att := rec.Attachments[i]
	if att.IsDefault {
		return netconf.Invalid("pod %s/%s: %s is the pod's default network, which is removed only with the pod", req.Pod.Namespace, req.Pod.Name, req.IfName)
	}
	if n, err := netconf.ParseNetwork(req.Config, att.Network); err == nil && n.Name != att.Network {
		return netconf.Invalid("pod %s/%s: %s is network %s, not %s", req.Pod.Namespace, req.Pod.Name, req.IfName, att.DisplayName(), n.Name)
	}
	_, err = h.step(ctx, p, func(ctx context.Context, ch *delegate.Change) (string, error) {
		i := indexOf(ch.Record.Attachments, req.IfName)
		if i < 0 {
			return "", nil
		}
		att := ch.Record.Attachments[i]
		if err := ch.Detach(ctx, req.IfName); err != nil {
			return "", h.warn(ctx, att.DisplayName(), fmt.Errorf("remove network %s from %s: %w", att.DisplayName(), req.IfName, err))
		}
		return fmt.Sprintf("Remove %s from %s", req.IfName, att.DisplayName()), nil
	}, "RemovedInterface")
	if err != nil {
		return err
	}
	h.log.Info("UNPLUG done", "result", "ok", "network", att.DisplayName(), delegate.AttachmentIfnameKey, req.IfName)
	return nil
}

// plugCall checks req against the container's record and builds the step's
// state from it. A nil record (and nil error) means the container has none.
func (p *Plugin) plugCall(req *PlugRequest) (*hotplugCall, *scratch.Record, error) {
	if p.node == nil {
		return nil, nil, errors.New("plugging a network into a running pod is the node daemon's")
	}
	if err := scratch.ValidateContainerID(req.ContainerID); err != nil {
		return nil, nil, netconf.Invalid("CNI_CONTAINERID %q: %v", req.ContainerID, err)
	}
	if req.Pod.Namespace == "" || req.Pod.Name == "" {
		return nil, nil, netconf.Invalid("CNI_ARGS must name the pod (K8S_POD_NAMESPACE %q, K8S_POD_NAME %q)", req.Pod.Namespace, req.Pod.Name)
	}
	rec, err := (&scratch.Store{Dir: p.node.CNIDir}).Load(req.ContainerID)
	if err != nil || rec == nil {
		return nil, nil, err
	}
	if rec.Pod.Namespace != req.Pod.Namespace || rec.Pod.Name != req.Pod.Name || (req.Pod.UID != "" && rec.Pod.UID != req.Pod.UID) {
		return nil, nil, netconf.Invalid("container %s is pod %s (uid %s), not %s/%s (uid %s)", req.ContainerID, rec.Pod.String(), rec.Pod.UID, req.Pod.Namespace, req.Pod.Name, req.Pod.UID)
	}
	if len(rec.Config) == 0 {
		return nil, nil, netconf.Invalid("container %s was attached by a manifold older than hot-plug; recreate the pod to hot-plug into it", req.ContainerID)
	}
	if req.NetNS != "" && !sameNetNS(p.hostRoot, req.NetNS, rec.NetNS) {
		return nil, nil, netconf.Invalid("CNI_NETNS %q is not the network namespace recorded for container %s (%q)", req.NetNS, req.ContainerID, rec.NetNS)
	}
	pod := &k8sclient.Pod{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name, UID: rec.Pod.UID}
	h, err := p.hotplugCall(rec, pod)
	if err != nil {
		return nil, nil, err
	}
	h.log = h.log.With("cmd", "PLUG")
	return h, rec, nil
}

// selectionFor is the annotation entry the request answers: the NAD it
// names (the entry of the pod's networks annotation that asks for the
// request's interface, else a NAD of the config's name in the pod's
// namespace), with the request's own ips, mac and cni-args.
func (h *hotplugCall) selectionFor(ctx context.Context, req *PlugRequest) (netconf.NetworkSelection, error) {
	sel := netconf.NetworkSelection{Namespace: req.Pod.Namespace, InterfaceRequest: req.IfName, IPs: req.IPs, MAC: req.MAC, CNIArgs: req.CNIArgs}
	if req.IfName != "" {
		// A consistent read (no UID: not from the watch cache), so that an
		// annotation edit that the caller has seen is there.
		pod, err := h.api.WaitForPod(ctx, h.pod.Namespace, h.pod.Name, "", 0)
		if err != nil {
			return sel, apiError(fmt.Errorf("read pod %s/%s: %w", h.pod.Namespace, h.pod.Name, err))
		}
		sels, err := netconf.ParseNetworksAnnotation(pod.Annotations[annotNetworks], pod.Namespace)
		if err == nil && pod.UID == h.pod.UID {
			for _, s := range sels {
				if s.InterfaceRequest == req.IfName {
					sel.Namespace, sel.Name = s.Namespace, s.Name
					return sel, nil
				}
			}
		}
	}
	n, err := netconf.ParseNetwork(req.Config, "")
	if err != nil {
		return sel, netconf.Invalid("pod %s/%s: the request's network config: %v", req.Pod.Namespace, req.Pod.Name, err)
	}
	sel.Name = n.Name
	return sel, nil
}

// sameNetNS reports whether two netns paths (as the host sees them) are the
// same namespace: the same path, or the same nsfs inode, read under
// hostRoot where both are there, else in the daemon's own view (a
// /proc/<pid>/ns/net path, with hostPID).
func sameNetNS(hostRoot, a, b string) bool {
	if a == b {
		return true
	}
	for _, root := range []string{hostRoot, "/"} {
		var sa, sb unix.Stat_t
		if unix.Stat(filepath.Join(root, a), &sa) == nil && unix.Stat(filepath.Join(root, b), &sb) == nil {
			return sa.Dev == sb.Dev && sa.Ino == sb.Ino
		}
	}
	return false
}
