package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/dra"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

const (
	// reasonClaimStatus is the Warning event of a claim status write-back
	// that failed.
	reasonClaimStatus = "ErrorUpdatingClaimStatus"
	// maxClaimStatusAttempts bounds the applies of one claim's entries: a
	// conflict leaves fewer fields each time.
	maxClaimStatusAttempts = 3
	// claimStatusReleaseBound bounds DEL's release of its claims' status.
	claimStatusReleaseBound = 5 * time.Second
)

// byClaim groups the attachments that used a DRA device by their claim
// (namespace/name), in a stable order.
func byClaim(atts []netconf.Attachment) ([]string, map[string][]int) {
	groups := map[string][]int{}
	var keys []string
	for i := range atts {
		if atts[i].Claim == nil {
			continue
		}
		k := atts[i].Claim.ClaimKey()
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	sort.Strings(keys)
	return keys, groups
}

// writeClaimStatus writes, after a successful ADD, an entry into the
// status.devices of each ResourceClaim whose device an attachment used
// (KEP-4817): the device, its networkData (interface name, addresses,
// MAC) and a Ready condition. It is a server-side apply as the sandbox's
// own field manager (dra.FieldManager), so what the driver wrote stays
// and a field the driver owns is left to it (dra.Resolve). The pod is
// attached whatever happens here: a write that fails is logged and sent
// as a Warning event, never returned.
func (p *Plugin) writeClaimStatus(ctx context.Context, c *call, pc *podContext, atts []netconf.Attachment, results []types.Result) {
	keys, groups := byClaim(atts)
	podName := pc.pod.Namespace + "/" + pc.pod.Name
	for _, k := range keys {
		var entries []k8sclient.DeviceStatus
		for _, i := range groups[k] {
			st, err := netconf.BuildNetworkStatus(atts[i], results[i])
			if err != nil {
				c.log.Warn("build the claim status of an attachment", "network", atts[i].DisplayName(), "error", err)
				continue
			}
			entries = append(entries, dra.Entry(dra.Attached{Device: *atts[i].Claim, Network: atts[i].DisplayName(), IfName: st.Interface, Prefixes: st.Prefixes, MAC: st.Mac}, podName, p.now()))
		}
		cd := atts[groups[k][0]].Claim
		if err := applyClaimStatus(ctx, c, pc.api, cd, entries); err != nil {
			c.log.Warn("claim status not written", "claim", k, "error", err)
			msg := fmt.Sprintf("status.devices of ResourceClaim %s not written: %v", k, err)
			if err := pc.api.Event(ctx, pc.pod, k8sclient.EventWarning, reasonClaimStatus, msg, hostname(), p.now()); err != nil {
				c.log.Warn("send event", "error", err)
			}
		}
	}
}

// applyClaimStatus applies entries as the call's sandbox. A conflict with
// the driver drops the parts it owns, a conflict with an earlier sandbox of
// the pod (one whose DEL never came) takes them over, and the rest is
// applied again, within a few attempts.
func applyClaimStatus(ctx context.Context, c *call, api podAPI, cd *netconf.ClaimDevice, entries []k8sclient.DeviceStatus) error {
	manager := dra.FieldManager(c.args.ContainerID)
	force := false
	for attempt := 1; ; attempt++ {
		err := api.ApplyClaimDeviceStatus(ctx, cd.Namespace, cd.Name, cd.UID, manager, entries, force)
		var conflict *k8sclient.ApplyConflict
		if !errors.As(err, &conflict) {
			if err == nil {
				c.log.Info("claim status written", "claim", cd.ClaimKey(), "devices", len(entries))
			}
			return err
		}
		if attempt == maxClaimStatusAttempts {
			return err
		}
		res := dra.Resolve(entries, conflict.Causes)
		if len(res.Kept) > 0 {
			c.log.Info("claim status: fields another writer owns are left to it", "claim", cd.ClaimKey(), "kept", strings.Join(res.Kept, "; "))
		}
		if len(res.Entries) == 0 {
			return nil
		}
		entries, force = res.Entries, res.Force
	}
}

// releaseClaims is the runner's Released: after DEL (or a hot-plug's
// detach) of attachments that used a DRA device, what this sandbox wrote
// into their claims' status.devices is taken back, by applying nothing as
// its field manager; what the driver wrote stays. DEL needs no API server,
// and this does not change that: it runs only when an API client can be
// built from the config, within apiTimeout and at most 5 s, and a failure
// is logged and sent as a Warning event, not returned. What is left is
// harmless and short-lived: when the claim is deallocated (a claim made
// from a template is deleted with its pod), the API server drops its
// status.devices entries itself.
func (p *Plugin) releaseClaims(conf *netconf.Config, log *slog.Logger) func(ctx context.Context, rec *scratch.Record, atts []netconf.Attachment) {
	return func(ctx context.Context, rec *scratch.Record, atts []netconf.Attachment) {
		keys, groups := byClaim(atts)
		if len(keys) == 0 {
			return
		}
		if !k8sclient.Configured(conf.Kubeconfig) {
			log.Warn("no API server: the status.devices entries of the pod's claims are left for the API server to drop with the allocation", "claims", strings.Join(keys, ", "))
			return
		}
		api, err := p.newAPI(conf)
		if err != nil {
			log.Warn("no API client: the status.devices entries of the pod's claims are left", "claims", strings.Join(keys, ", "), "error", err)
			return
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(conf.APITimeout, claimStatusReleaseBound))
		defer cancel()
		manager := dra.FieldManager(rec.ContainerID)
		for _, k := range keys {
			cd := atts[groups[k][0]].Claim
			err := api.ApplyClaimDeviceStatus(bctx, cd.Namespace, cd.Name, cd.UID, manager, nil, false)
			if err == nil || errors.Is(err, k8sclient.ErrNotFound) {
				log.Debug("claim status released", "claim", k, "error", err)
				continue
			}
			log.Warn("claim status not released", "claim", k, "error", err)
			if rec.Pod.Name == "" {
				continue
			}
			pod := &k8sclient.Pod{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name, UID: rec.Pod.UID}
			msg := fmt.Sprintf("status.devices of ResourceClaim %s not released: %v", k, err)
			if err := api.Event(bctx, pod, k8sclient.EventWarning, reasonClaimStatus, msg, hostname(), p.now()); err != nil {
				log.Warn("send event", "error", err)
			}
		}
	}
}
