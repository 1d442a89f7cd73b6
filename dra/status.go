package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// What manifold writes into a claim's status.devices (KEP-4817).
const (
	// ConditionReady is the condition type KEP-4817 names for a device that
	// is set up as the claim asked.
	ConditionReady = "Ready"
	// ReasonAttached is the Ready condition's reason when manifold wrote it.
	ReasonAttached = "NetworkAttached"
	// managerPrefix starts the field manager of every write of manifold's.
	managerPrefix = "manifold/"
	// maxIPs is the API's bound on networkData.ips.
	maxIPs = 16
)

// FieldManager is the server-side apply field manager of the status that
// manifold writes for one sandbox (its container ID): each sandbox owns its
// own fields, so that its DEL removes them and nothing of a later sandbox of
// the same pod, whichever of the two the runtime calls first. An ID too long
// for the API's 128-character bound is hashed.
func FieldManager(containerID string) string {
	if len(managerPrefix)+len(containerID) <= 128 {
		return managerPrefix + containerID
	}
	sum := sha256.Sum256([]byte(containerID))
	return managerPrefix + "sha256-" + hex.EncodeToString(sum[:20])
}

// IsManifoldManager reports whether a field manager is one of manifold's:
// the fields of another sandbox's (a DEL that never came) are taken over,
// never those of a driver.
func IsManifoldManager(manager string) bool { return strings.HasPrefix(manager, managerPrefix) }

// Attached is one attachment that used a claim's device, as ADD left it.
type Attached struct {
	Device  netconf.ClaimDevice
	Network string
	IfName  string
	// Prefixes are its addresses in CIDR form, MAC its hardware address.
	Prefixes []string
	MAC      string
}

// Entry is the status.devices entry manifold writes for a: the device, its
// networkData, and a Ready condition saying who attached it where.
func Entry(a Attached, pod string, now time.Time) k8sclient.DeviceStatus {
	e := k8sclient.DeviceStatus{Driver: a.Device.Driver, Pool: a.Device.Pool, Device: a.Device.Device}
	if a.Device.ShareID != "" {
		id := a.Device.ShareID
		e.ShareID = &id
	}
	ips := dedupe(a.Prefixes)
	if len(ips) > maxIPs {
		ips = ips[:maxIPs]
	}
	e.NetworkData = &k8sclient.NetworkDeviceData{InterfaceName: a.IfName, IPs: ips, HardwareAddress: a.MAC}
	e.Conditions = []k8sclient.Condition{{
		Type: ConditionReady, Status: "True", Reason: ReasonAttached,
		Message:            fmt.Sprintf("attached to pod %s as %s from network %s by manifold", pod, a.IfName, a.Network),
		LastTransitionTime: now.UTC().Format(time.RFC3339),
	}}
	return e
}

func dedupe(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Part is what of an entry a conflict is about.
type Part int

const (
	// PartNetworkData is an entry's networkData.
	PartNetworkData Part = iota + 1
	// PartReady is an entry's Ready condition.
	PartReady
	// PartOther is any other field (the entry's keys: not a conflict an
	// apply can have, listed for completeness).
	PartOther
)

// Resolution is what to do about an apply's conflicts.
type Resolution struct {
	// Entries are what to apply again: without the parts that another
	// writer (the driver) owns; nil when nothing is left.
	Entries []k8sclient.DeviceStatus
	// Force is set when what is left conflicted with manifold's own
	// managers (an earlier sandbox's), whose fields are taken over.
	Force bool
	// Kept names the parts left to their writers, for the log:
	// "driver/pool/device networkData (owned by x)".
	Kept []string
}

// Resolve decides about the conflicts of applying entries: a part that a
// writer other than manifold owns is theirs, and is dropped; a part only
// manifold's other sandboxes own is taken over (Force).
func Resolve(entries []k8sclient.DeviceStatus, causes []k8sclient.ConflictCause) Resolution {
	type key struct {
		entry int
		part  Part
	}
	foreign := map[key]string{}
	ours := map[key]bool{}
	for _, c := range causes {
		i, p := locate(entries, c.Field)
		switch {
		case i < 0:
		case IsManifoldManager(c.Manager):
			ours[key{i, p}] = true
		default:
			if _, ok := foreign[key{i, p}]; !ok {
				foreign[key{i, p}] = c.Manager
			}
		}
	}
	var res Resolution
	for i, e := range entries {
		if m, ok := foreign[key{i, PartOther}]; ok {
			res.Kept = append(res.Kept, fmt.Sprintf("%s/%s/%s (owned by %s)", e.Driver, e.Pool, e.Device, m))
			continue
		}
		if m, ok := foreign[key{i, PartNetworkData}]; ok {
			e.NetworkData = nil
			res.Kept = append(res.Kept, fmt.Sprintf("%s/%s/%s networkData (owned by %s)", e.Driver, e.Pool, e.Device, m))
		}
		if m, ok := foreign[key{i, PartReady}]; ok {
			e.Conditions = nil
			res.Kept = append(res.Kept, fmt.Sprintf("%s/%s/%s condition Ready (owned by %s)", e.Driver, e.Pool, e.Device, m))
		}
		if e.NetworkData == nil && e.Conditions == nil {
			continue
		}
		res.Force = res.Force || (ours[key{i, PartNetworkData}] && e.NetworkData != nil) || (ours[key{i, PartReady}] && e.Conditions != nil) || ours[key{i, PartOther}]
		res.Entries = append(res.Entries, e)
	}
	return res
}

// locate finds which entry and part a conflict's field path is about:
// `.status.devices[device="x",driver="d",pool="p"].networkData.ips`. The
// keys are matched as the path quotes them; -1 when no entry matches.
func locate(entries []k8sclient.DeviceStatus, field string) (int, Part) {
	for i, e := range entries {
		if !strings.Contains(field, fmt.Sprintf("device=%q", e.Device)) ||
			!strings.Contains(field, fmt.Sprintf("driver=%q", e.Driver)) ||
			!strings.Contains(field, fmt.Sprintf("pool=%q", e.Pool)) {
			continue
		}
		_, rest, _ := strings.Cut(field, "]")
		switch {
		case strings.HasPrefix(rest, ".networkData"):
			return i, PartNetworkData
		case strings.HasPrefix(rest, ".conditions"):
			return i, PartReady
		}
		return i, PartOther
	}
	return -1, 0
}
