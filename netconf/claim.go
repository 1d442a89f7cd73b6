package netconf

import (
	"encoding/json"
	"fmt"
	"strings"
)

// NAD annotations that tie a network to the devices Dynamic Resource
// Allocation gave the pod (docs/devices.md). Multus's
// k8s.v1.cni.cncf.io/resourceName names a claim too, when it has no "/".
const (
	// AnnotResourceClaim names a claim of the pod and, optionally, one of its
	// requests: "<claim>" or "<claim>/<request>" (a request of a
	// prioritized list may be named down to its subrequest,
	// "<claim>/<request>/<subrequest>").
	AnnotResourceClaim = "manifold-cni.github.io/resource-claim"
	// AnnotDeviceKeys maps plugin keys to attributes of the DRA device, as a
	// JSON object: {"device": "dra.example.com/ifName"} gives every plugin
	// of the network the device's dra.example.com/ifName as "device". When
	// set, it replaces the default keys (deviceID and pciBusID).
	AnnotDeviceKeys = "manifold-cni.github.io/device-keys"
)

// ClaimRef is what a network names of the pod's DRA claims: Claim is the
// name in pod.spec.resourceClaims (or the ResourceClaim's own name, as Multus
// v4.3.0 compares it); Request, when set, narrows it to one request.
type ClaimRef struct {
	Claim   string
	Request string
}

func (r ClaimRef) String() string {
	if r.Request == "" {
		return r.Claim
	}
	return r.Claim + "/" + r.Request
}

// IsDevicePluginResource reports whether a NAD's resourceName names a
// device-plugin resource rather than a DRA claim. A device plugin's resource
// is an extended resource, which is always qualified by a domain
// ("intel.com/sriov_vf"); the name of a claim never holds a "/".
func IsDevicePluginResource(resourceName string) bool {
	return strings.Contains(resourceName, "/")
}

// ParseClaimRef parses the value of AnnotResourceClaim. The claim is
// checked as a Kubernetes object name (a pod's claim name is a DNS label,
// the stricter of the two), each part of the request as a DNS label, which
// is what the API server allows for request names.
func ParseClaimRef(v string) (ClaimRef, error) {
	v = strings.TrimSpace(v)
	claim, request, _ := strings.Cut(v, "/")
	ref := ClaimRef{Claim: claim, Request: request}
	if err := checkSubdomain(AnnotResourceClaim, claim); err != nil {
		return ClaimRef{}, err
	}
	if request == "" && strings.Contains(v, "/") {
		return ClaimRef{}, fmt.Errorf("%q %q names no request after the \"/\"", AnnotResourceClaim, truncate(v, 80))
	}
	if request != "" {
		parts := strings.Split(request, "/")
		if len(parts) > 2 {
			return ClaimRef{}, fmt.Errorf("%q %q has more than <claim>/<request>/<subrequest>", AnnotResourceClaim, truncate(v, 80))
		}
		for _, p := range parts {
			if err := checkLabel(AnnotResourceClaim+" request", p); err != nil {
				return ClaimRef{}, err
			}
		}
	}
	return ref, nil
}

// reservedPluginKeys are the keys of a plugin's config that AnnotDeviceKeys
// may not set: they choose the plugin and shape what libcni passes it, and a
// DRA driver's attribute must not pick the binary that runs.
var reservedPluginKeys = map[string]bool{
	"type": true, "name": true, "cniVersion": true, "cniVersions": true, "ipam": true, "dns": true,
	"runtimeConfig": true, "capabilities": true, "args": true, "prevResult": true, "plugins": true,
	"disableCheck": true, "disableGC": true,
}

// maxDeviceKeys bounds AnnotDeviceKeys; a network sets a handful at most.
const maxDeviceKeys = 16

// ParseDeviceKeys parses the value of AnnotDeviceKeys: a JSON object of
// plugin key to device attribute name. The attribute names are qualified
// (domain/name) or not, as in a ResourceSlice; an unqualified one belongs to
// the device's driver.
func ParseDeviceKeys(v string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("%q %q is not a JSON object of plugin key to device attribute: %v", AnnotDeviceKeys, truncate(v, 80), err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%q %q maps no key", AnnotDeviceKeys, truncate(v, 80))
	}
	if len(m) > maxDeviceKeys {
		return nil, fmt.Errorf("%q maps %d keys, more than %d", AnnotDeviceKeys, len(m), maxDeviceKeys)
	}
	for k, attr := range m {
		if k == "" || len(k) > maxLabelLen || reservedPluginKeys[k] {
			return nil, fmt.Errorf("%q: plugin key %q cannot be set from a device attribute", AnnotDeviceKeys, truncate(k, 80))
		}
		if err := checkAttributeName(attr); err != nil {
			return nil, fmt.Errorf("%q: key %q: %w", AnnotDeviceKeys, k, err)
		}
	}
	return m, nil
}

// checkAttributeName checks a device attribute name as the API server does:
// an optional DNS subdomain and "/", then a C identifier of at most 32
// characters.
func checkAttributeName(name string) error {
	domain, id, qualified := strings.Cut(name, "/")
	if !qualified {
		domain, id = "", name
	}
	if qualified && (len(domain) > maxSubdomainLen || !dnsSubdomainRE.MatchString(domain)) {
		return fmt.Errorf("attribute %q: domain %q is not a DNS subdomain", truncate(name, 80), truncate(domain, 80))
	}
	if id == "" || len(id) > 32 || !isCIdentifier(id) {
		return fmt.Errorf("attribute %q: %q is not a C identifier of at most 32 characters", truncate(name, 80), truncate(id, 40))
	}
	return nil
}

func isCIdentifier(s string) bool {
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// ClaimDevice is the DRA device an attachment was given: which claim, and
// which of its allocated devices. The record keeps it, so that DEL removes
// what manifold wrote into the claim's status.devices without asking the
// kubelet which device it was.
type ClaimDevice struct {
	// Namespace and Name are the ResourceClaim's, UID its UID when known.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// PodClaim is the claim's name in pod.spec.resourceClaims.
	PodClaim string `json:"podClaim,omitempty"`
	// Request is the allocation result's request ("<request>" or
	// "<request>/<subrequest>").
	Request string `json:"request"`
	// Driver, Pool and Device name the device; ShareID the share of it, for a
	// device allocated in shares.
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	// PCIBusID is the device's standard PCI address attribute in its
	// ResourceSlice ("" for none), from which the attachment's Device Info
	// file is written.
	PCIBusID string `json:"pciBusID,omitempty"`
}

// ID is the device as the API names it: driver/pool/device.
func (d *ClaimDevice) ID() string { return d.Driver + "/" + d.Pool + "/" + d.Device }

// ClaimKey is namespace/name of the ResourceClaim.
func (d *ClaimDevice) ClaimKey() string { return d.Namespace + "/" + d.Name }
