package netconf

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Capability names (CNI CONVENTIONS.md) that an annotation can ask for.
const (
	CapPortMappings   = "portMappings"
	CapBandwidth      = "bandwidth"
	CapIPs            = "ips"
	CapMAC            = "mac"
	CapInfinibandGUID = "infinibandGUID"
	CapDeviceID       = "deviceID"
)

// AttachmentForSelection turns a selection and its NAD's spec.config into an
// attachment (DESIGN §3, §4). An empty spec.config is looked up by the NAD's name
// in conf.ConfDir. It returns warnings for requests that a plugin may not honour but
// that also travel in CNI_ARGS (ips, mac); every error is a CNI error with code 7
// that names the NAD.
//
// "ipam-claim-reference" is validated (ParseNetworksAnnotation) but not forwarded:
// Multus drops it (its NetworkSelectionElement has no such field), and the IPAM
// that uses it (OVN-Kubernetes) reads it from the pod's annotation itself.
// Inventing a transport here would be one that no plugin reads.
//
// The network's plugins are held to the rules for networks from a NAD:
// no meta-plugin, and only conf.AllowedPluginTypes when that is set
// (docs/security.md).
func AttachmentForSelection(sel NetworkSelection, nadConfig string, conf *Config) (Attachment, []string, error) {
	nad := sel.Namespace + "/" + sel.Name
	if err := sel.Validate(); err != nil {
		return Attachment{}, nil, Invalid("network %s: invalid selection: %v", nad, err)
	}
	n, err := NetworkOfNAD(nad, sel.Name, nadConfig, conf.ConfDirs(), conf.AllowedPluginTypes)
	if err != nil {
		return Attachment{}, nil, err
	}
	if len(sel.CNIArgs) > 0 {
		b, err := mergeCNIArgs(n.Bytes, sel.CNIArgs)
		if err != nil {
			return Attachment{}, nil, Invalid("network %s: add \"cni-args\": %v", nad, err)
		}
		n.Bytes = b
	}
	att := NewAttachment(n, nad)
	att.IfName = sel.InterfaceRequest
	if len(sel.DefaultRoute) > 0 {
		att.DefaultRoute = append([]string(nil), sel.DefaultRoute...)
	} else if sel.DefaultRoute != nil {
		att.DefaultRouteOwn = true
	}
	warnings, err := applyRequests(&att, n, sel, conf.StrictCapabilities)
	if err != nil {
		return Attachment{}, nil, err
	}
	return att, warnings, nil
}

// networkForNAD parses spec.config, or finds the NAD's network in the conf
// dirs (confDir, then multusConfDir) when spec.config is empty.
func networkForNAD(nad, name, nadConfig string, confDirs []string) (*Network, error) {
	if strings.TrimSpace(nadConfig) == "" {
		n, dir, err := FindNetworkInDirs(confDirs, name)
		if err != nil {
			return nil, Invalid("network %s: spec.config is empty, and looking for a config named %q in %s failed: %v", nad, name, dir, err)
		}
		if n == nil {
			return nil, Invalid("network %s: spec.config is empty, and %s has no config named %q", nad, strings.Join(confDirs, " nor "), name)
		}
		return n, nil
	}
	n, err := ParseNetwork([]byte(nadConfig), name)
	if err != nil {
		return nil, Invalid("network %s: invalid spec.config: %v", nad, err)
	}
	return n, nil
}

// applyRequests fills the attachment's runtime config and CNI_ARGS from the
// selection, after checking that some plugin of the network can honour each
// request (DESIGN §4). A request for portMappings, bandwidth,
// infiniband-guid or deviceID that no plugin declares the capability for is
// left out, as Multus (through libcni) leaves it out, and recorded in
// att.Unserved for a warning; with strict (strictCapabilities) it fails
// the attachment with code 7 instead.
func applyRequests(att *Attachment, n *Network, sel NetworkSelection, strict bool) ([]string, error) {
	rc := map[string]any{}
	var warnings []string
	// need reports whether a plugin declares capName; when none does, the
	// request is left out (recorded in att.Unserved), or refused when strict.
	need := func(annotKey, capName string) (bool, error) {
		if n.Capabilities[capName] {
			return true, nil
		}
		if strict {
			return false, Invalid("network %s: the annotation asks for %q, but no plugin of the network (%s) declares the %q capability (strictCapabilities)",
				att.NAD, annotKey, strings.Join(n.Types, ", "), capName)
		}
		att.Unserved = append(att.Unserved, Unserved{Request: annotKey, Capability: capName, Types: n.Types})
		return false, nil
	}
	want := func(annotKey, capName string) {
		if !n.Capabilities[capName] {
			warnings = append(warnings, fmt.Sprintf("the annotation asks for %q, but no plugin of the network (%s) declares the %q capability; it is passed in CNI_ARGS only",
				annotKey, strings.Join(n.Types, ", "), capName))
		}
	}
	requests := []struct {
		asked             bool
		annotKey, capName string
		value             func() any
	}{
		{len(sel.PortMappings) > 0, "portMappings", CapPortMappings, func() any { return append([]PortMapping(nil), sel.PortMappings...) }},
		{sel.Bandwidth != nil, "bandwidth", CapBandwidth, func() any { bw := *sel.Bandwidth; return &bw }},
		{sel.InfinibandGUID != "", "infiniband-guid", CapInfinibandGUID, func() any { return sel.InfinibandGUID }},
		{sel.DeviceID != "", "deviceID", CapDeviceID, func() any { return sel.DeviceID }},
	}
	for _, r := range requests {
		if !r.asked {
			continue
		}
		ok, err := need(r.annotKey, r.capName)
		if err != nil {
			return nil, err
		}
		if ok {
			rc[r.capName] = r.value()
		}
	}
	if _, ok := rc[CapDeviceID]; ok {
		// The device it names is the one the network gets (docs/devices.md).
		att.DeviceID = sel.DeviceID
	}
	if len(sel.IPs) > 0 {
		want("ips", CapIPs)
		rc[CapIPs] = append([]string(nil), sel.IPs...)
		// As written, CIDRs included: static IPAM needs the prefix length.
		att.CNIArgs = append(att.CNIArgs, [2]string{"IP", strings.Join(sel.IPs, ",")})
	}
	if sel.MAC != "" {
		want("mac", CapMAC)
		rc[CapMAC] = sel.MAC
		att.CNIArgs = append(att.CNIArgs, [2]string{"MAC", sel.MAC})
	}
	if len(rc) > 0 {
		att.RuntimeConfig = rc
	}
	return warnings, nil
}

// Unserved is a request of the networks annotation that an attachment was
// made without: no plugin of its network declares the capability that would
// carry it, and strictCapabilities is off.
type Unserved struct {
	Request    string   // the annotation's key: "portMappings", "infiniband-guid", …
	Capability string   // the capability no plugin declares
	Types      []string // the network's plugin types
}

// Message says what was left out and why, for a log line and an event.
func (u Unserved) Message(network string) string {
	return fmt.Sprintf("network %s: the annotation asks for %q, but no plugin of the network (%s) declares the %q capability; the network is attached without it (strictCapabilities refuses such a pod instead)",
		network, u.Request, strings.Join(u.Types, ", "), u.Capability)
}

// mergeCNIArgs sets each of extra's keys in args.cni of every plugin of the
// conflist. The annotation wins over a key the NAD already has; every other key,
// in args.cni and elsewhere in the plugin, is kept.
func mergeCNIArgs(conflist []byte, extra map[string]any) ([]byte, error) {
	encoded, keys, err := encodeKeys(extra)
	if err != nil {
		return nil, err
	}
	return EditPlugins(conflist, func(i int, p map[string]json.RawMessage) error {
		args, err := subObject(p, "args")
		if err != nil {
			return err
		}
		cni, err := subObject(args, "cni")
		if err != nil {
			return fmt.Errorf("\"args\": %w", err)
		}
		for _, k := range keys {
			cni[k] = encoded[k]
		}
		if args["cni"], err = json.Marshal(cni); err != nil {
			return err
		}
		p["args"], err = json.Marshal(args)
		return err
	})
}

// SetPluginKeys sets each of keys at the top level of every plugin of the
// conflist, replacing what a plugin had: how a device reaches sriov-cni
// ("deviceID") and host-device ("pciBusID").
func SetPluginKeys(conflist []byte, keys map[string]any) ([]byte, error) {
	encoded, names, err := encodeKeys(keys)
	if err != nil {
		return nil, err
	}
	return EditPlugins(conflist, func(_ int, p map[string]json.RawMessage) error {
		for _, k := range names {
			p[k] = encoded[k]
		}
		return nil
	})
}

// EditPlugins decodes a conflist, calls edit on each plugin object in order,
// and encodes it again; keys that edit does not touch are kept as they were.
func EditPlugins(conflist []byte, edit func(i int, plugin map[string]json.RawMessage) error) ([]byte, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(conflist, &list); err != nil {
		return nil, fmt.Errorf("decode conflist: %w", err)
	}
	var plugins []map[string]json.RawMessage
	if err := json.Unmarshal(list["plugins"], &plugins); err != nil {
		return nil, fmt.Errorf("decode \"plugins\": %w", err)
	}
	for i, p := range plugins {
		if p == nil {
			return nil, fmt.Errorf("plugin %d is not an object", i)
		}
		if err := edit(i, p); err != nil {
			return nil, fmt.Errorf("plugin %d: %w", i, err)
		}
	}
	b, err := json.Marshal(plugins)
	if err != nil {
		return nil, err
	}
	list["plugins"] = b
	return json.Marshal(list)
}

// encodeKeys encodes each value of m, and lists the keys in order.
func encodeKeys(m map[string]any) (map[string]json.RawMessage, []string, error) {
	encoded := make(map[string]json.RawMessage, len(m))
	keys := make([]string, 0, len(m))
	for k, v := range m {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, nil, fmt.Errorf("encode key %q: %w", k, err)
		}
		encoded[k] = b
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return encoded, keys, nil
}

// subObject returns m[key] decoded as an object, or a new empty one when the key
// is absent or null.
func subObject(m map[string]json.RawMessage, key string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil || out == nil {
		return nil, fmt.Errorf("%q is %s, not an object", key, describeValue(raw))
	}
	return out, nil
}
