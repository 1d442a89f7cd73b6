package k8sclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// DeviceStatus is an entry of a ResourceClaim's status.devices (KEP-4817):
// driver, pool, device and shareID identify it; the rest is what a writer
// says about the device.
type DeviceStatus struct {
	Driver      string             `json:"driver"`
	Pool        string             `json:"pool"`
	Device      string             `json:"device"`
	ShareID     *string            `json:"shareID,omitempty"`
	Conditions  []Condition        `json:"conditions,omitempty"`
	Data        json.RawMessage    `json:"data,omitempty"`
	NetworkData *NetworkDeviceData `json:"networkData,omitempty"`
}

// Condition is a metav1.Condition.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// NetworkDeviceData is what a device became in the pod's network: its
// interface name, its addresses in CIDR form, and its hardware address.
type NetworkDeviceData struct {
	InterfaceName   string   `json:"interfaceName,omitempty"`
	IPs             []string `json:"ips,omitempty"`
	HardwareAddress string   `json:"hardwareAddress,omitempty"`
}

// ApplyConflict is the error of a server-side apply that other field
// managers own some of the fields of: each cause names the manager and the
// field (".status.devices[driver=\"d\",device=\"x\",pool=\"p\"].networkData").
type ApplyConflict struct {
	Causes []ConflictCause
	msg    string
}

// ConflictCause is one field of an ApplyConflict and who owns it.
type ConflictCause struct {
	Manager string
	Field   string
}

func (e *ApplyConflict) Error() string { return e.msg }

// ApplyClaimDeviceStatus sets, by server-side apply on the status
// subresource, the status.devices entries that fieldManager owns of the
// claim: the fields it applied before and applies no more are removed, and
// what other managers own (the driver's entries, conditions and data) is
// kept. An empty devices gives up every field the manager owns. Without
// force, fields that another manager set to other values are a conflict,
// returned as an *ApplyConflict; with force they are taken over.
//
// A non-empty uid makes the apply conditional on the claim being that one:
// a claim deleted and made again under its name is refused (409).
func (c *Client) ApplyClaimDeviceStatus(ctx context.Context, namespace, name, uid, fieldManager string, devices []DeviceStatus, force bool) error {
	meta := map[string]string{"name": name, "namespace": namespace}
	if uid != "" {
		meta["uid"] = uid
	}
	if devices == nil {
		devices = []DeviceStatus{}
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": ResourceGroup + "/" + ResourceVersion,
		"kind":       "ResourceClaim",
		"metadata":   meta,
		"status":     map[string]any{"devices": devices},
	})
	if err != nil {
		return err
	}
	q := url.Values{"fieldManager": {fieldManager}}
	if force {
		q.Set("force", "true")
	}
	err = c.do(ctx, "PATCH", claimPath(namespace, name)+"/status?"+q.Encode(), "application/apply-patch+yaml", body, nil)
	var se *statusError
	if errors.As(err, &se) && se.code == http.StatusConflict && len(se.causes) > 0 {
		ac := &ApplyConflict{msg: fmt.Sprintf("apply status.devices of ResourceClaim %s/%s as %s: HTTP 409: %s", namespace, name, fieldManager, se.message)}
		for _, cause := range se.causes {
			if cause.Type != "FieldManagerConflict" {
				continue
			}
			ac.Causes = append(ac.Causes, ConflictCause{Manager: conflictManager(cause.Message), Field: cause.Field})
		}
		if len(ac.Causes) > 0 {
			return ac
		}
	}
	if err != nil {
		return fmt.Errorf("apply status.devices of ResourceClaim %s/%s as %s: %w", namespace, name, fieldManager, err)
	}
	return nil
}

// conflictManager takes the manager's name out of a conflict cause's
// message: `conflict with "name"`, followed by " using v1" and a time for
// an update, or " with subresource "status"".
func conflictManager(msg string) string {
	rest, ok := strings.CutPrefix(msg, "conflict with ")
	if !ok {
		return ""
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return ""
	}
	name, err := strconv.Unquote(quoted)
	if err != nil {
		return ""
	}
	return name
}
