package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// The hot-plug of the node daemon (docs/hotplug.md): a running pod brought to
// its networks annotation, one attachment at a time, through the same parsing,
// NAD reads and rules as ADD.

// Hotplug is what one Reconcile did.
type Hotplug struct {
	// Added and Removed count the attachments that changed.
	Added, Removed int
	// Skipped says why nothing was looked at ("" when the record was): no
	// record, a record of another pod, or one from before hot-plug.
	Skipped string
}

// ErrHotplugRefused wraps the error of a change that the annotation asks for
// but that cannot be made as asked (a bad annotation, a missing NAD, a name
// that is taken): nothing was changed, and the pod got a Warning.
var ErrHotplugRefused = errors.New("hot-plug refused")

// recordConfig is what a record keeps of the call's config: all but the
// runtime's runtimeConfig, which holds the pod's annotations as the sandbox
// was created with them, and which only the default network uses.
func recordConfig(stdin []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &m); err != nil {
		return nil
	}
	delete(m, "runtimeConfig")
	delete(m, "prevResult")
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// hotplugCall is the state of one Reconcile.
type hotplugCall struct {
	conf    *netconf.Config
	log     *slog.Logger
	runner  *delegate.Runner
	api     podAPI
	pod     *k8sclient.Pod
	id      string
	timeout time.Duration
}

// Reconcile brings the container's attachments to what pod's networks
// annotation asks for: what the annotation no longer lists is detached
// first, then what it adds is attached, each in a step of its own
// (delegate.Change). After each step the pod's network-status is written
// and an event sent. A change that cannot be made as asked changes nothing
// and returns an error wrapping ErrHotplugRefused; a step that fails returns
// its error, and the steps before it stay made.
func (p *Plugin) Reconcile(ctx context.Context, containerID string, pod *k8sclient.Pod) (Hotplug, error) {
	var out Hotplug
	if p.node == nil {
		return out, errors.New("hot-plug runs in the node daemon only")
	}
	// The diff needs the record's summary only: a pod whose annotation asks
	// for nothing new costs a few KiB of the record, not its configs
	// (up to scratch.MaxRecordBytes).
	store := &scratch.Store{Dir: p.node.CNIDir}
	sum, err := store.LoadSummary(containerID)
	if err != nil {
		return out, err
	}
	if out.Skipped = skipReason(sum, pod); out.Skipped != "" {
		return out, nil
	}
	sels, parseErr := netconf.ParseNetworksAnnotation(pod.Annotations[annotNetworks], pod.Namespace)
	if parseErr == nil {
		if removes, adds := diffRequests(sum.Attachments, sels); len(removes) == 0 && len(adds) == 0 {
			return out, nil
		}
	}
	// A change to make, or an annotation to refuse: the whole record.
	rec, err := store.Load(containerID)
	if err != nil {
		return out, err
	}
	var full *scratch.Summary
	if rec != nil {
		full = scratch.Summarize(rec)
	}
	if out.Skipped = skipReason(full, pod); out.Skipped != "" {
		return out, nil
	}
	h, err := p.hotplugCall(rec, pod)
	if err != nil {
		return out, err
	}
	if parseErr != nil {
		return out, h.refuse(ctx, "", parseErr)
	}
	removes, adds := diffRequests(full.Attachments, sels)
	if len(removes) == 0 && len(adds) == 0 {
		return out, nil
	}
	atts, err := h.plan(ctx, p, rec, removes, adds)
	if err != nil {
		return out, err
	}
	for _, ifName := range removes {
		gone, err := h.step(ctx, p, func(ctx context.Context, ch *delegate.Change) (string, error) {
			i := indexOf(ch.Record.Attachments, ifName)
			if i < 0 {
				return "", nil
			}
			att := ch.Record.Attachments[i]
			if err := ch.Detach(ctx, ifName); err != nil {
				return "", h.warn(ctx, att.DisplayName(), fmt.Errorf("remove network %s from %s: %w", att.DisplayName(), ifName, err))
			}
			return fmt.Sprintf("Remove %s from %s", ifName, att.DisplayName()), nil
		}, "RemovedInterface")
		if gone || err != nil {
			return out, err
		}
		out.Removed++
	}
	for _, att := range atts {
		gone, err := h.step(ctx, p, func(ctx context.Context, ch *delegate.Change) (string, error) {
			res, err := ch.Attach(ctx, att)
			if err != nil {
				return "", h.warn(ctx, att.DisplayName(), err)
			}
			var wg sync.WaitGroup
			p.unservedEvents(ctx, h.log, h.api, h.pod, []netconf.Attachment{att}, &wg)
			wg.Wait()
			return addedInterfaceMessage(att.IfName, res, att.DisplayName()), nil
		}, "AddedInterface")
		if gone || err != nil {
			return out, err
		}
		out.Added++
	}
	h.log.Info("HOTPLUG done", "result", "ok", "added", out.Added, "removed", out.Removed)
	return out, nil
}

// skipReason says why a container's record is not hot-plugged ("" when it
// is): there is none, it is another pod's, or it predates hot-plug.
func skipReason(sum *scratch.Summary, pod *k8sclient.Pod) string {
	switch {
	case sum == nil:
		return "no record"
	case sum.Pod.UID != pod.UID || sum.Pod.Namespace != pod.Namespace || sum.Pod.Name != pod.Name:
		return "record of another pod"
	case !sum.HasConfig:
		return "record from before hot-plug"
	}
	return ""
}

// hotplugCall builds what the steps need from the record's config, with the
// daemon's node paths, as a call from the shim would have them.
func (p *Plugin) hotplugCall(rec *scratch.Record, pod *k8sclient.Pod) (*hotplugCall, error) {
	conf, err := netconf.ParseConfig(rec.Config)
	if err != nil {
		return nil, fmt.Errorf("the config recorded for container %s: %w", rec.ContainerID, err)
	}
	if err := p.node.Apply(rec.Config, conf); err != nil {
		return nil, fmt.Errorf("the config recorded for container %s: %w", rec.ContainerID, err)
	}
	log, _ := newLogger(conf, p.stderr, p.logs) // the daemon's log files stay open
	log = log.With("cmd", "HOTPLUG", "containerID", rec.ContainerID, "pod", rec.Pod.String())
	h := &hotplugCall{conf: conf, log: log, pod: pod, id: rec.ContainerID, timeout: conf.CallTimeout}
	h.runner = &delegate.Runner{
		CNI:                delegate.NewCNI(conf.BinDir, "", conf.CNIDir, &delegate.Exec{Root: p.hostRoot, Stderr: os.Stderr, ReapLater: p.shared()}),
		Store:              &scratch.Store{Dir: conf.CNIDir},
		Log:                log,
		LockTimeout:        conf.LockTimeout,
		UndoTimeout:        conf.CallTimeout,
		RetryDeleteOnError: conf.RetryDeleteOnError,
		Released:           p.releaseClaims(conf, log),
	}
	if !k8sclient.Configured(conf.Kubeconfig) {
		return nil, fmt.Errorf("container %s: no kubeconfig, so no NADs to read", rec.ContainerID)
	}
	h.api, err = p.newAPI(conf)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// diffRequests compares the annotation with the record: the interfaces of
// the attachments that no entry asks for any more (last attached first), and
// the entries that no attachment answers, in the annotation's order. The
// default network, and what the config attaches (defaultNetworks), are
// never part of it.
//
// An entry answers to the attachment made for it. Writing into an entry the
// name its interface already has, or taking that name out of it, asks for
// the same interface again: the attachment stays, as it would under Multus's
// dynamic networks controller, which reads names off network-status (its
// e2e names the interfaces of unnamed entries this way). So a named entry is
// first matched by its interface, then unnamed entries by their exact
// request, then by their request with the name left out.
func diffRequests(recorded []scratch.AttachmentSummary, sels []netconf.NetworkSelection) (removes []string, adds []netconf.NetworkSelection) {
	used := make([]bool, len(recorded))
	matched := make([]bool, len(sels))
	keys := make([]string, len(sels))
	for j, sel := range sels {
		keys[j] = netconf.SelectionKey(sel)
	}
	unnamed := map[int]string{} // the recorded requests with their name left out
	nameless := func(i int) string {
		k, ok := unnamed[i]
		if !ok {
			k = requestWithoutInterface(recorded[i].Request)
			unnamed[i] = k
		}
		return k
	}
	match := func(j int, ok func(i int, a scratch.AttachmentSummary) bool) {
		for i, a := range recorded {
			if !used[i] && !a.IsDefault && a.Request != "" && ok(i, a) {
				used[i], matched[j] = true, true
				return
			}
		}
	}
	for j, sel := range sels {
		if sel.InterfaceRequest == "" {
			continue
		}
		want := requestWithoutInterface(keys[j])
		match(j, func(i int, a scratch.AttachmentSummary) bool {
			return a.IfName == sel.InterfaceRequest && (a.Request == keys[j] || want != "" && nameless(i) == want)
		})
	}
	for j, sel := range sels {
		if !matched[j] && sel.InterfaceRequest == "" {
			match(j, func(_ int, a scratch.AttachmentSummary) bool { return a.Request == keys[j] })
		}
	}
	for j, sel := range sels {
		if !matched[j] && sel.InterfaceRequest == "" {
			match(j, func(i int, _ scratch.AttachmentSummary) bool { return keys[j] != "" && nameless(i) == keys[j] })
		}
	}
	for j, sel := range sels {
		if !matched[j] {
			adds = append(adds, sel)
		}
	}
	for i := len(recorded) - 1; i >= 0; i-- {
		if a := recorded[i]; !used[i] && !a.IsDefault && a.Request != "" {
			removes = append(removes, a.IfName)
		}
	}
	return removes, adds
}

// requestWithoutInterface is a recorded request (netconf.SelectionKey) with
// its interface name left out, or "" when it does not decode. Numbers stay
// json.Number, as the parser makes them, so that the key is the one
// SelectionKey gives the same entry written without a name.
func requestWithoutInterface(key string) string {
	var sel netconf.NetworkSelection
	dec := json.NewDecoder(strings.NewReader(key))
	dec.UseNumber()
	if err := dec.Decode(&sel); err != nil {
		return ""
	}
	if sel.InterfaceRequest == "" {
		return key
	}
	sel.InterfaceRequest = ""
	return netconf.SelectionKey(sel)
}

// plan builds the attachments to add, before anything changes: isolation,
// the NADs, the plugins' rules and the requests' values are checked as at
// ADD, and each gets its interface name. Names that stay keep theirs; an
// entry that names none gets the lowest free net<i>. Anything wrong refuses
// the whole change.
func (h *hotplugCall) plan(ctx context.Context, p *Plugin, rec *scratch.Record, removes []string, adds []netconf.NetworkSelection) ([]netconf.Attachment, error) {
	taken := map[string]bool{}
	for _, a := range rec.Attachments {
		taken[a.IfName] = true
	}
	for _, n := range removes {
		delete(taken, n)
	}
	for _, sel := range adds {
		if sel.InterfaceRequest == "" {
			continue
		}
		if taken[sel.InterfaceRequest] {
			return nil, h.refuse(ctx, sel.Namespace+"/"+sel.Name, netconf.Invalid("interface %s is already taken in the pod", sel.InterfaceRequest))
		}
		taken[sel.InterfaceRequest] = true
	}
	nads := newNADCache(h.api, p.nadMemory, h.conf.Kubeconfig)
	nads.prefetch(ctx, h.conf, h.pod.Namespace, adds)
	atts := make([]netconf.Attachment, 0, len(adds))
	for _, sel := range adds {
		name := sel.Namespace + "/" + sel.Name
		if err := checkIsolation(h.conf, h.pod.Namespace, &sel, false); err != nil {
			return nil, h.refuse(ctx, name, err)
		}
		att, err := attachSelection(ctx, h.log, h.conf, nads, sel)
		if err != nil {
			if netconf.Code(err) == types.ErrTryAgainLater {
				return nil, err // the API server: retried, no Warning
			}
			return nil, h.refuse(ctx, name, err)
		}
		if att.WantsDefaultRoute() {
			return nil, h.refuse(ctx, name, netconf.Invalid("\"default-route\" cannot be hot-plugged: it would move the default route of a running pod"))
		}
		if att.Resource != "" || att.ResourceClaim != "" {
			// A device is allocated to a pod before its sandbox exists; the
			// devices a running pod has are all drawn by its networks already.
			return nil, h.refuse(ctx, name, netconf.Invalid("its NAD draws a device (%s), and networks with devices cannot be hot-plugged (docs/devices.md)", deviceSource(&att)))
		}
		if att.IfName == "" {
			for i := 1; ; i++ {
				if n := "net" + strconv.Itoa(i); !taken[n] {
					att.IfName = n
					break
				}
			}
		}
		if err := netconf.ValidateIfName(att.IfName); err != nil {
			return nil, h.refuse(ctx, name, netconf.Invalid("%v", err))
		}
		taken[att.IfName] = true
		atts = append(atts, att)
	}
	return atts, nil
}

// step runs one change under the container's lock, then writes the pod's
// network-status and sends reason's event while it still holds the lock, so
// that the pod's DEL, which waits for the lock, comes after both. It reports
// gone when the record is gone: the pod's DEL has run, and it wins.
func (h *hotplugCall) step(ctx context.Context, p *Plugin, do func(context.Context, *delegate.Change) (string, error), reason string) (gone bool, err error) {
	if p.reports != nil && !p.reports.wait(h.id, h.conf.APITimeout+time.Second) {
		h.log.Warn("the status write of the ADD is still running; going on without it")
	}
	sctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	ch, err := h.runner.BeginChange(sctx, h.id)
	if errors.Is(err, delegate.ErrNoRecord) {
		h.log.Info("the container's record is gone (its DEL ran); hot-plug stops")
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer ch.End()
	msg, err := do(sctx, ch)
	if err != nil || msg == "" {
		return false, err
	}
	h.writeStatus(sctx, ch)
	if err := h.api.Event(sctx, h.pod, k8sclient.EventNormal, reason, msg, hostname(), time.Now()); err != nil {
		h.log.Warn("send event", "error", err)
	}
	h.log.Info(msg)
	return false, nil
}

// writeStatus rewrites the pod's network-status from the record and the
// delegates' cached results: one patch, on the condition of the pod's UID.
func (h *hotplugCall) writeStatus(ctx context.Context, ch *delegate.Change) {
	results := ch.Results()
	statuses := make([]netconf.NetworkStatus, 0, len(results))
	for i, res := range results {
		att := ch.Record.Attachments[i]
		if att.Auxiliary {
			continue // no interface of its own
		}
		if res == nil {
			h.log.Warn("no cached result; the attachment is left out of network-status", "network", att.DisplayName(), delegate.AttachmentIfnameKey, att.IfName)
			continue
		}
		st, err := netconf.BuildNetworkStatus(att, res)
		if err != nil {
			h.log.Warn("build network status", "network", att.DisplayName(), "error", err)
			continue
		}
		statuses = append(statuses, st)
	}
	b, err := netconf.MarshalNetworkStatus(statuses)
	if err != nil {
		h.log.Warn("encode network status", "error", err)
		return
	}
	if err := h.api.PatchPodAnnotation(ctx, h.pod.Namespace, h.pod.Name, h.pod.UID, annotNetworkStatus, string(b)); err != nil {
		h.log.Warn("write network status", "error", err)
	}
}

// refuse sends the pod a Warning that names the network ("" for the whole
// annotation) and the reason, and returns the error as ErrHotplugRefused.
func (h *hotplugCall) refuse(ctx context.Context, network string, cause error) error {
	h.warn(ctx, network, cause)
	return fmt.Errorf("%w: %w", ErrHotplugRefused, cause)
}

// warn sends the pod a Warning for a change that failed, logs it, and
// returns cause.
func (h *hotplugCall) warn(ctx context.Context, network string, cause error) error {
	msg := cause.Error()
	if network != "" && !strings.Contains(msg, network) {
		msg = "network " + network + ": " + msg
	}
	h.log.Warn("HOTPLUG failed", "result", "error", "code", netconf.Code(cause), "error", msg)
	if err := h.api.Event(ctx, h.pod, k8sclient.EventWarning, "HotplugFailed", msg, hostname(), time.Now()); err != nil {
		h.log.Warn("send event", "error", err)
	}
	return cause
}

func indexOf(atts []netconf.Attachment, ifName string) int {
	for i := range atts {
		if atts[i].IfName == ifName {
			return i
		}
	}
	return -1
}
