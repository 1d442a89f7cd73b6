package netconf

import "encoding/json"

// Attachment is one network to attach to a pod: which network, under which
// interface name, with which per-attachment settings. The scratch record stores a
// list of these, so the JSON names are part of the on-disk format.
type Attachment struct {
	// Network is the CNI network name.
	Network string `json:"network"`
	// NAD is "namespace/name" of the NetworkAttachmentDefinition, or "" when the
	// network came from a file or an inline delegate.
	NAD string `json:"nad,omitempty"`
	// IfName is the interface name inside the pod.
	IfName string `json:"ifname"`
	// IsDefault marks the pod's default network (the one that gets CNI_IFNAME).
	IsDefault bool `json:"default,omitempty"`
	// Auxiliary marks the auxiliary chain (AuxiliaryNetwork): it runs on
	// an interface name of its own but makes no interface, so it has no
	// network-status entry, no AddedInterface event, and no routes to move.
	Auxiliary bool `json:"auxiliary,omitempty"`
	// Config is the conflist that is handed to libcni.
	Config json.RawMessage `json:"config"`
	// Capabilities is the union of the capabilities declared by Config's plugins.
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	// CNIArgs are extra CNI_ARGS for this attachment only (IP=, MAC=), added after
	// the runtime's own.
	CNIArgs [][2]string `json:"cniArgs,omitempty"`
	// RuntimeConfig holds the capability arguments for this attachment
	// (runtimeConfig.ips, .mac, .portMappings, ...). libcni passes each key only to
	// plugins that declare the capability.
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
	// DefaultRoute lists the gateways requested with "default-route" (DESIGN §6).
	DefaultRoute []string `json:"defaultRoute,omitempty"`
	// DefaultRouteOwn is "default-route": [], the multi-net spec's way of
	// saying that this attachment's own default routes, as its plugins set
	// them, are the pod's (docs/configuration.md, "Default route per family").
	DefaultRouteOwn bool `json:"defaultRouteOwn,omitempty"`
	// Resource is the device-plugin resource the network draws a device
	// from (its NAD's k8s.v1.cni.cncf.io/resourceName), and DeviceID the
	// device it was given (docs/devices.md). DEL needs neither from the
	// kubelet: they are recorded.
	Resource string `json:"resource,omitempty"`
	DeviceID string `json:"deviceID,omitempty"`
	// ResourceClaim is the NAD's AnnotResourceClaim: the DRA claim (and
	// request) the network draws a device from, in the precise form; "" for
	// none. A Resource without "/" names a claim too, in Multus's form.
	ResourceClaim string `json:"resourceClaim,omitempty"`
	// DeviceKeys is the NAD's AnnotDeviceKeys, parsed: the plugin keys a DRA
	// device's attributes go to. Only ADD uses it, before the record is
	// written, so the record does not keep it.
	DeviceKeys map[string]string `json:"-"`
	// Claim is the DRA device the network was given; nil for none.
	Claim *ClaimDevice `json:"claim,omitempty"`
	// DeviceInfoFile is the attachment's Device Info file (the spec's CNI
	// file), which DEL removes; "" when it has none.
	DeviceInfoFile string `json:"deviceInfoFile,omitempty"`
	// NoDeviceOf is the resource of a network attached without a device:
	// the kubelet listed none of it for the pod, and the pod has no DRA
	// device of it (as Multus attaches it). ADD tells of it. Not recorded.
	NoDeviceOf string `json:"-"`
	// Unserved lists the annotation's requests that the attachment is made
	// without (applyRequests); ADD warns of them. Not recorded.
	Unserved []Unserved `json:"-"`
	// Request is SelectionKey of the annotation entry that asked for this
	// attachment, or "" when no entry of the networks annotation did: the
	// node daemon's hot-plug compares these with the annotation.
	Request string `json:"request,omitempty"`
}

// NewAttachment makes an attachment for n with no per-attachment settings.
func NewAttachment(n *Network, nad string) Attachment {
	return Attachment{Network: n.Name, NAD: nad, Config: n.Bytes, Capabilities: n.Capabilities}
}

// WantsDefaultRoute reports whether the attachment's selection had
// "default-route", with gateways or empty.
func (a *Attachment) WantsDefaultRoute() bool {
	return len(a.DefaultRoute) > 0 || a.DefaultRouteOwn
}

// DisplayName is how an attachment is named in status, events and errors: the NAD
// as "ns/name" where there is one, else the CNI network name.
func (a *Attachment) DisplayName() string {
	if a.NAD != "" {
		return a.NAD
	}
	return a.Network
}
