package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

func (p *Plugin) cmdAdd(args *skel.CmdArgs) error {
	c, err := p.start("ADD", args)
	if err != nil {
		return err
	}
	p.awaitReport(c)
	return c.finish(p.add(c))
}

// podContext is what ADD learned about the pod from the API server.
type podContext struct {
	api  podAPI
	nads *nadCache      // nil when api is
	pod  *k8sclient.Pod // nil: no API, or the pod was not found
	// podRead is set when pod was read from the API server; its annotations
	// from the runtime (CapPodAnnotations) give no spec or status.
	podRead bool
	// statusUID is the UID the status patch requires the pod to have (empty:
	// none; a static pod's mirror has a UID of its own).
	statusUID string
	// pending are the networks built from the daemon's memory of their NADs
	// while the NADs' reads were on the way; each is confirmed before its
	// delegate runs (confirm).
	pending []pendingNAD
}

func (p *Plugin) add(c *call) error {
	ctx := c.ctx
	if c.args.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is empty", "")
	}
	if c.conf.PodAnnotationsErr != nil {
		return c.conf.PodAnnotationsErr
	}
	if err := waitReadiness(ctx, c.conf.ReadinessIndicatorFile, c.conf.ReadinessTimeout); err != nil {
		return err
	}
	p.expectDefault(ctx, c)
	pc, err := p.lookupPod(ctx, c)
	if err != nil {
		return err
	}
	atts, err := p.networksFor(ctx, c, pc)
	if err != nil {
		p.warnEvent(ctx, c, pc, err)
		return err
	}
	rec := &scratch.Record{
		ContainerID: c.args.ContainerID,
		NetNS:       c.args.Netns,
		Pod:         c.pod,
		RuntimeArgs: c.cniArgs,
		Attachments: atts,
		Config:      recordConfig(c.args.StdinData),
	}
	if len(pc.pending) > 0 {
		c.runner.Confirm = pc.confirm(c)
	}
	c.runner.Prepare = prepareDeviceInfo(c)
	results, err := c.runner.Add(ctx, rec)
	if err != nil {
		p.warnEvent(ctx, c, pc, err)
		return err
	}
	// Convert before reporting: an ADD that fails here writes no status.
	res, err := results[0].GetAsVersion(c.conf.CNIVersion)
	if err != nil {
		return fmt.Errorf("convert result of default network %s to cniVersion %s: %w", atts[0].DisplayName(), c.conf.CNIVersion, err)
	}
	if p.reports != nil {
		// The write outlives the call, and its requests are bounded by
		// apiTimeout each.
		bg := context.WithoutCancel(ctx)
		p.reports.start(c.args.ContainerID, p.answered, func(stop <-chan struct{}) { p.report(bg, c, pc, atts, results, stop) })
	} else {
		p.report(ctx, c, pc, atts, results, nil)
	}
	return res.PrintTo(p.stdout)
}

// expectDefault starts the default network's plugin process while the pod and
// its NADs are read (docs/performance-history.md, change 7). It
// predicts the default network from the static config alone; when the pod or a
// NAD turns out to change it, the process is killed unused.
func (p *Plugin) expectDefault(ctx context.Context, c *call) {
	if c.runner.Prestart == nil {
		return
	}
	atts, err := staticNetworks(ctx, c.conf, nil, c.pod)
	if err != nil || len(atts) == 0 {
		return
	}
	att := atts[0]
	att.IfName = c.args.IfName
	c.runner.ExpectAdd(&scratch.Record{
		ContainerID: c.args.ContainerID,
		NetNS:       c.args.Netns,
		RuntimeArgs: c.cniArgs,
		Attachments: []netconf.Attachment{att},
	})
}

// lookupPod finds the pod when there is an API server and the runtime named a
// pod. When the runtime passed the pod's annotations (CapPodAnnotations), they
// are the pod's, as the kubelet gave them for this very sandbox, and the pod is
// not read at all. Otherwise it is read; a pod that is still not visible after
// the bounded wait is not an error: it gets only its static networks, and a
// warning is logged.
func (p *Plugin) lookupPod(ctx context.Context, c *call) (*podContext, error) {
	pc := &podContext{}
	if !k8sclient.Configured(c.conf.Kubeconfig) {
		warnUnserved(c)
		return pc, nil
	}
	if c.pod.Name == "" {
		return pc, nil
	}
	api, err := p.newAPI(c.conf)
	if err != nil {
		return nil, netconf.Invalid("%v", err)
	}
	pc.api, pc.nads = api, newNADCache(api, p.nadMemory, c.conf.Kubeconfig)
	// The clusterNetwork and defaultNetworks NADs do not depend on the pod:
	// their reads start now, and go on during the pod's round trip, if any.
	keys := staticNADKeys(c.conf, c.pod.Namespace)
	if c.conf.PodAnnotations != nil {
		pc.nads.start(ctx, keys)
		pc.pod = &k8sclient.Pod{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID, Annotations: c.conf.PodAnnotations}
		if isAPIPod(pc.pod) {
			pc.statusUID = c.pod.UID
		}
		return pc, nil
	}
	var wg sync.WaitGroup
	if len(keys) > 0 {
		wg.Go(func() { pc.nads.fetch(ctx, keys) })
	}
	pod, err := api.WaitForPod(ctx, c.pod.Namespace, c.pod.Name, c.pod.UID, c.conf.PodWaitTimeout)
	wg.Wait()
	if errors.Is(err, k8sclient.ErrNotFound) {
		c.log.Warn("pod not found; attaching only the default networks and writing no status", "wait", c.conf.PodWaitTimeout.String())
		return pc, nil
	}
	if err != nil {
		return nil, apiError(err)
	}
	if c.pod.UID != "" && pod.UID != c.pod.UID && isAPIPod(pod) {
		return nil, netconf.Invalid("pod UID from the API (%s) differs from K8S_POD_UID (%s): the pod was replaced", pod.UID, c.pod.UID)
	}
	pc.pod, pc.statusUID, pc.podRead = pod, pod.UID, true
	return pc, nil
}

// warnUnserved says, for a node with no API server, which of the pod's
// requests for networks cannot be served: with no NADs to read, the pod gets
// only the static networks. It is a warning, not a failure, as with Multus
// on such a node (docs/configuration.md); the runtime passes the pod's
// annotations, or manifold could not know of them at all.
func warnUnserved(c *call) {
	for _, k := range []string{annotNetworks, annotDefaultNetwork} {
		if v := c.conf.PodAnnotations[k]; strings.TrimSpace(v) != "" {
			c.log.Warn("the pod asks for networks, but manifold has no kubeconfig to read their NADs with; attaching only the static networks", "annotation", k, "value", v)
		}
	}
}

// isAPIPod reports whether the pod came from the API server, not from a file
// or URL on the node (a static pod, which the API knows only by its mirror,
// under another UID).
func isAPIPod(pod *k8sclient.Pod) bool {
	src := pod.Annotations[annotConfigSource]
	return src == "" || src == "api"
}

// networksFor builds the pod's delegate list (DESIGN §3) with interface names.
func (p *Plugin) networksFor(ctx context.Context, c *call, pc *podContext) ([]netconf.Attachment, error) {
	var nads nadSource
	if pc.nads != nil {
		nads = pc.nads
	}
	var req podRequest
	if pc.pod != nil {
		// The pod's NADs are read while the static networks are built: with the
		// annotations from the runtime, the static NADs' reads are still on the
		// way then.
		req = parsePodRequest(c.conf, pc.pod)
		pc.nads.prefetchRequest(ctx, c.conf, pc.pod.Namespace, &req)
	}
	atts, err := staticNetworks(ctx, c.conf, nads, c.pod)
	if err != nil {
		return nil, err
	}
	if pc.pod != nil {
		if err := p.podNetworks(ctx, c, pc, &req, &atts); err != nil {
			return nil, err
		}
	}
	atts[0].IsDefault = true
	atts[0].RuntimeConfig = mergeRuntimeConfig(runtimeArgsFor(c.conf.RuntimeConfig, &atts[0]), atts[0].RuntimeConfig)
	// Multus's auxiliary chain runs last, after the pod's own networks.
	aux, err := netconf.AuxiliaryNetwork(c.conf)
	if err != nil {
		return nil, err
	}
	if aux != nil {
		att := netconf.NewAttachment(aux, "")
		att.Auxiliary = true
		atts = append(atts, att)
	}
	if err := netconf.AssignIfNames(atts, c.args.IfName); err != nil {
		return nil, netconf.Invalid("%v", err)
	}
	if err := p.assignDevices(ctx, c, pc, atts); err != nil {
		return nil, err
	}
	if err := delegate.CheckDefaultRoutes(atts); err != nil {
		return nil, err
	}
	return atts, nil
}

// podRequest is what the pod's annotations ask for, parsed once, as the
// admission webhook parses them too (netconf.ParsePodRequest).
type podRequest = netconf.PodRequest

func parsePodRequest(conf *netconf.Config, pod *k8sclient.Pod) podRequest {
	return netconf.ParsePodRequest(pod.Annotations, pod.Namespace, conf.MultusNamespace)
}

// podNetworks applies the pod's annotations: the default-network override, then
// the networks it asks for. In the node daemon, a network whose NAD is still
// being read is built from the daemon's memory of that NAD, and confirmed by
// the read before its delegate runs (pc.confirm); the default network never
// is, since its delegate runs first.
func (p *Plugin) podNetworks(ctx context.Context, c *call, pc *podContext, req *podRequest, atts *[]netconf.Attachment) error {
	pod, nads := pc.pod, pc.nads
	if req.OverrideErr != nil {
		return req.OverrideErr
	}
	if sel := req.Override; sel != nil {
		if err := checkIsolation(c.conf, pod.Namespace, sel, true); err != nil {
			return err
		}
		att, err := attachSelection(ctx, c.log, c.conf, nads, *sel)
		if err != nil {
			return err
		}
		(*atts)[0] = att
	}
	if req.NetworksErr != nil {
		return req.NetworksErr
	}
	for _, sel := range req.Networks {
		if err := checkIsolation(c.conf, pod.Namespace, &sel, false); err != nil {
			return err
		}
		// A network that draws a device is never speculated on: its device
		// is assigned before the first delegate runs, from its NAD as read.
		if def, ok := nads.speculate(nadKey{sel.Namespace, sel.Name}); ok && !def.drawsDevice() {
			// A remembered config that makes no attachment waits for the read.
			if att, err := attachmentFor(c.log, c.conf, sel, def, true); err == nil {
				pc.pending = append(pc.pending, pendingNAD{index: len(*atts), sel: sel, def: def})
				*atts = append(*atts, att)
				continue
			}
		}
		att, err := attachSelection(ctx, c.log, c.conf, nads, sel)
		if err != nil {
			return err
		}
		*atts = append(*atts, att)
	}
	return nil
}

// checkIsolation applies namespaceIsolation: a pod may use NADs in its own
// namespace and in globalNamespaces. The default-network override may also name
// a NAD in the system namespace, where such NADs live by default.
func checkIsolation(conf *netconf.Config, podNamespace string, sel *netconf.NetworkSelection, override bool) error {
	ns := sel.Namespace
	if !conf.NamespaceIsolation || ns == podNamespace || conf.IsGlobalNamespace(ns) || (override && ns == conf.MultusNamespace) {
		return nil
	}
	return netconf.Invalid("network %s/%s: namespaceIsolation forbids a pod in namespace %s to use a NAD in namespace %s", ns, sel.Name, podNamespace, ns)
}

// runtimeArgsFor is the runtime's capability args as the default network gets
// them. The pod's annotations (CapPodAnnotations), which can be large, stay only
// when a plugin of that network declares the capability: libcni would not pass
// them otherwise, so the record and libcni's cache need not hold them.
func runtimeArgsFor(fromRuntime map[string]any, att *netconf.Attachment) map[string]any {
	if _, ok := fromRuntime[netconf.CapPodAnnotations]; !ok || att.Capabilities[netconf.CapPodAnnotations] {
		return fromRuntime
	}
	out := make(map[string]any, len(fromRuntime)-1)
	for k, v := range fromRuntime {
		if k != netconf.CapPodAnnotations {
			out[k] = v
		}
	}
	return out
}

// mergeRuntimeConfig gives the default network the runtime's capability args
// (portMappings, bandwidth, ...) plus what the default-network annotation asked
// for; the annotation wins on a key both set.
func mergeRuntimeConfig(fromRuntime, fromAnnotation map[string]any) map[string]any {
	if len(fromAnnotation) == 0 {
		return fromRuntime
	}
	out := make(map[string]any, len(fromRuntime)+len(fromAnnotation))
	for k, v := range fromRuntime {
		out[k] = v
	}
	for k, v := range fromAnnotation {
		out[k] = v
	}
	return out
}

// attachSelection turns one requested network into an attachment, once its NAD
// has been read.
func attachSelection(ctx context.Context, log *slog.Logger, conf *netconf.Config, nads *nadCache, sel netconf.NetworkSelection) (netconf.Attachment, error) {
	def, found, err := nads.NAD(ctx, sel.Namespace, sel.Name)
	if err != nil {
		return netconf.Attachment{}, err
	}
	return attachmentFor(log, conf, sel, def, found)
}

// attachmentFor builds the attachment of sel from its NAD; found is false
// when the NAD does not exist.
func attachmentFor(log *slog.Logger, conf *netconf.Config, sel netconf.NetworkSelection, def nadDef, found bool) (netconf.Attachment, error) {
	if !found {
		return netconf.Attachment{}, &noNetworkError{netconf.Invalid("network %s/%s: NetworkAttachmentDefinition not found", sel.Namespace, sel.Name)}
	}
	att, warnings, err := netconf.AttachmentForSelection(sel, def.config, conf)
	if err != nil {
		return netconf.Attachment{}, err
	}
	if err := def.drawFrom(&att); err != nil {
		return netconf.Attachment{}, err
	}
	for _, w := range warnings {
		log.Warn(w, "network", att.DisplayName())
	}
	for _, u := range att.Unserved {
		log.Warn("request left out: no plugin of the network declares its capability", "network", att.DisplayName(), "request", u.Request, "capability", u.Capability, "types", strings.Join(u.Types, ","))
	}
	att.Request = netconf.SelectionKey(sel)
	return att, nil
}

// noNetworkError is a pod's ADD that failed because a NAD it names does
// not exist: its Warning event has Multus's reason, NoNetworkFound, which
// alerts match on. It is a code-7 CNI error (Unwrap).
type noNetworkError struct{ err *types.Error }

func (e *noNetworkError) Error() string { return e.err.Error() }
func (e *noNetworkError) Unwrap() error { return e.err }

// waitReadiness waits, bounded, for the readiness indicator file (DESIGN §2).
func waitReadiness(ctx context.Context, path string, bound time.Duration) error {
	if path == "" {
		return nil
	}
	deadline := time.Now().Add(bound)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return netconf.TryAgainLater("readiness indicator file %s is still missing after %s", path, bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
