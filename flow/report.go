package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// report writes the pod's network-status and sends one AddedInterface event per
// attachment (DESIGN §8). The pod is already attached, so a failure here is
// logged, not returned: failing the ADD would tear down working networking over
// a missing annotation, and the runtime's retry would do the same again.
//
// The patch and the events go out together, over the one connection the call
// already has: the runtime waits for all of them, and one round trip costs less
// than 1+n in a row (docs/performance.md).
//
// The status.devices of the pod's DRA claims are written at the same time
// (writeClaimStatus), for pods in system namespaces too.
//
// stop is nil in the plugin binary; in the daemon, it ends the patch's
// retries (withRetries).
func (p *Plugin) report(ctx context.Context, c *call, pc *podContext, atts []netconf.Attachment, results []types.Result, stop <-chan struct{}) {
	if pc.pod == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if slices.ContainsFunc(atts, func(a netconf.Attachment) bool { return a.Claim != nil }) {
		wg.Go(func() { p.writeClaimStatus(ctx, c, pc, atts, results) })
	}
	p.unservedEvents(ctx, c.log, pc.api, pc.pod, atts, &wg)
	p.noDeviceEvents(ctx, c.log, pc.api, pc.pod, atts, &wg)
	// Pods in systemNamespaces get their network-status too, as under
	// Multus v4.3.0, whose check compares the pod's name, not its
	// namespace, with the list (docs/compatibility.md).
	statuses := make([]netconf.NetworkStatus, 0, len(atts))
	for i := range atts {
		if atts[i].Auxiliary {
			continue // no interface of its own
		}
		st, err := netconf.BuildNetworkStatus(atts[i], results[i])
		if err != nil {
			c.log.Warn("build network status", "network", atts[i].DisplayName(), "error", err)
			continue
		}
		st.DeviceInfo = deviceInfo(c, &atts[i])
		statuses = append(statuses, st)
	}
	if b, err := netconf.MarshalNetworkStatus(statuses); err != nil {
		c.log.Warn("encode network status", "error", err)
	} else {
		wg.Go(func() {
			patch := func() error {
				return pc.api.PatchPodAnnotation(ctx, pc.pod.Namespace, pc.pod.Name, pc.statusUID, annotNetworkStatus, string(b))
			}
			if err := withRetries(ctx, stop, patch); err != nil {
				c.log.Warn("write network status", "error", err)
			}
		})
	}
	host := hostname()
	for i := range atts {
		if atts[i].Auxiliary || !madeSomething(results[i]) {
			continue
		}
		msg := addedInterfaceMessage(atts[i].IfName, results[i], atts[i].DisplayName())
		now := p.now()
		wg.Go(func() {
			if err := pc.api.Event(ctx, pc.pod, k8sclient.EventNormal, "AddedInterface", msg, host, now); err != nil {
				c.log.Warn("send event", "error", err)
			}
		})
	}
}

// unservedEvents sends a Warning event for each request of the pod's
// annotation that an attachment was made without (netconf.Unserved): the
// pod runs, without the value it asked for, and its owner is told which.
func (p *Plugin) unservedEvents(ctx context.Context, log *slog.Logger, api podAPI, pod *k8sclient.Pod, atts []netconf.Attachment, wg *sync.WaitGroup) {
	host := hostname()
	for i := range atts {
		for _, u := range atts[i].Unserved {
			msg := u.Message(atts[i].DisplayName() + " (" + atts[i].IfName + ")")
			now := p.now()
			wg.Go(func() {
				if err := api.Event(ctx, pod, k8sclient.EventWarning, ReasonCapabilityNotDeclared, msg, host, now); err != nil {
					log.Warn("send event", "error", err)
				}
			})
		}
	}
}

// ReasonCapabilityNotDeclared is the reason of the Warning event for a
// request left out (unservedEvents).
const ReasonCapabilityNotDeclared = "CapabilityNotDeclared"

// The reasons of the Warning event of a failed ADD: a NAD that does not
// exist (Multus's reason for it), or anything else.
const (
	ReasonNoNetworkFound       = "NoNetworkFound"
	ReasonErrorAddingInterface = "ErrorAddingInterface"
)

// warnEvent tells the pod's owner why its ADD failed.
func (p *Plugin) warnEvent(ctx context.Context, c *call, pc *podContext, cause error) {
	if pc == nil || pc.pod == nil {
		return
	}
	reason := ReasonErrorAddingInterface
	if nf := (*noNetworkError)(nil); errors.As(cause, &nf) {
		reason = ReasonNoNetworkFound
	}
	if err := pc.api.Event(ctx, pc.pod, k8sclient.EventWarning, reason, cause.Error(), hostname(), p.now()); err != nil {
		c.log.Warn("send event", "error", err)
	}
}

// addedInterfaceMessage is the AddedInterface event's message, as Multus
// writes it: "Add net1 [10.1.1.11/24 fd00::11/64] from default/macvlan" (Go's
// %v of the list of addresses in CIDR form, which separates them by spaces).
func addedInterfaceMessage(ifName string, res types.Result, network string) string {
	ips := resultIPs(res)
	if ips == nil {
		ips = []string{}
	}
	return fmt.Sprintf("Add %s %v from %s", ifName, ips, network)
}

// madeSomething reports whether a result names an interface or an address:
// Multus sends no AddedInterface event for a plugin that returned neither.
func madeSomething(res types.Result) bool {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return true // the event says what it can
	}
	return len(cur.Interfaces) > 0 || len(cur.IPs) > 0
}

// resultIPs lists a result's addresses in CIDR form, for the event message.
func resultIPs(res types.Result) []string {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(cur.IPs))
	for _, ip := range cur.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// statusRetries are the pauses before the daemon's second and third tries of
// a network-status patch that the API server could not take (a timeout, a
// lost connection, 5xx or 429: k8sclient.ErrUnavailable), as under a pod storm
// on a busy control plane. The daemon writes after it has answered, so a
// retry holds up no pod's start. A call of the same container that waits for
// the write (awaitReport), or the daemon's exit, ends the retries, so a
// status never lands after the DEL that undid it. The plugin binary does not
// retry: the runtime waits for its exit.
var statusRetries = []time.Duration{time.Second, 2 * time.Second}

// withRetries runs write, and while it fails with k8sclient.ErrUnavailable
// runs it again after each of statusRetries, until stop is closed. A nil
// stop (the plugin binary) means no retries.
func withRetries(ctx context.Context, stop <-chan struct{}, write func() error) error {
	err := write()
	if stop == nil {
		return err
	}
	for _, pause := range statusRetries {
		if !errors.Is(err, k8sclient.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-stop:
			return err
		case <-time.After(pause):
		}
		err = write()
	}
	return err
}
