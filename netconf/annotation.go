package netconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Limits on the networks annotations. A pod object is capped by the API server
// (annotations total 256 KiB), but each ADD parses the value again, and a real
// request lists a handful of networks, so a much lower cap costs nobody anything
// and keeps a hostile annotation cheap.
const (
	MaxAnnotationBytes   = 64 << 10
	MaxNetworkSelections = 64
)

// NetworkSelection is one network requested by a pod annotation (DESIGN §4).
type NetworkSelection struct {
	// Name and Namespace name the NetworkAttachmentDefinition. Namespace defaults
	// to the pod's (or, for the default-network annotation, the system namespace).
	Name, Namespace string
	// InterfaceRequest is the interface name asked for ("interface", "@ifname").
	InterfaceRequest string
	// IPs are the requested addresses, each an IP or a CIDR, as written.
	IPs []string
	// MAC is the requested 6-byte MAC address, as written.
	MAC string
	// InfinibandGUID is the requested 8-byte GUID, as written.
	InfinibandGUID string
	// PortMappings go to runtimeConfig.portMappings; Protocol is normalised to
	// lower case and defaults to "tcp".
	PortMappings []PortMapping
	// Bandwidth goes to runtimeConfig.bandwidth.
	Bandwidth *Bandwidth
	// DeviceID goes to runtimeConfig.deviceID.
	DeviceID string
	// CNIArgs is merged into args.cni of every plugin of the network. Numbers are
	// json.Number so that large integers survive the round trip unchanged.
	CNIArgs map[string]any
	// DefaultRoute lists gateway IPs: this attachment carries the pod's default
	// route (DESIGN §6).
	DefaultRoute []string
	// IPAMClaimReference names an IPAMClaim. It is validated and kept here for
	// callers; see AttachmentForSelection for why it is not forwarded.
	IPAMClaimReference string
}

// PortMapping is one entry of runtimeConfig.portMappings (CNI conventions).
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Bandwidth is runtimeConfig.bandwidth (CNI conventions): rates in bits per
// second, bursts in bits.
type Bandwidth struct {
	IngressRate  int64 `json:"ingressRate"`
	IngressBurst int64 `json:"ingressBurst"`
	EgressRate   int64 `json:"egressRate"`
	EgressBurst  int64 `json:"egressBurst"`
}

// ParseNetworksAnnotation parses the k8s.v1.cni.cncf.io/networks annotation. An
// empty (or all-blank) value asks for no networks. Every error is a CNI error with
// code 7 that names the entry (counted from 1), the field and the bad value.
func ParseNetworksAnnotation(value, podNamespace string) ([]NetworkSelection, error) {
	sels, err := parseAnnotation(value, podNamespace)
	if err != nil {
		return nil, Invalid("invalid networks annotation: %v", err)
	}
	return sels, nil
}

// ParseDefaultNetworkAnnotation parses v1.multus-cni.io/default-network, which
// replaces the pod's default network. It takes both forms, like the networks
// annotation, but must name exactly one network. An empty value returns nil. The
// namespace defaults to systemNamespace; an explicit one is kept, as Multus does
// (OVN-Kubernetes' persistent-IP setup names its own namespace there). An
// "interface" request is kept too: AssignIfNames refuses it unless it equals
// CNI_IFNAME, because the default network's name is the runtime's to choose.
func ParseDefaultNetworkAnnotation(value, systemNamespace string) (*NetworkSelection, error) {
	sels, err := parseAnnotation(value, systemNamespace)
	if err != nil {
		return nil, Invalid("invalid default-network annotation: %v", err)
	}
	switch {
	case strings.TrimSpace(value) == "":
		return nil, nil
	case len(sels) == 0:
		return nil, Invalid("invalid default-network annotation: %q names no network; it must name exactly one", truncate(value, 64))
	case len(sels) > 1:
		return nil, Invalid("invalid default-network annotation: it names %d networks; it must name exactly one", len(sels))
	}
	return &sels[0], nil
}

// parseAnnotation does the work for both annotations. Its errors are plain; the
// callers turn them into code-7 errors with the annotation's name in front.
func parseAnnotation(value, defaultNamespace string) ([]NetworkSelection, error) {
	if len(value) > MaxAnnotationBytes {
		return nil, fmt.Errorf("value is %d bytes, more than the limit of %d", len(value), MaxAnnotationBytes)
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	// The same test Multus applies, so a value means the same thing to both.
	if strings.ContainsAny(value, `[{"`) {
		return parseJSONForm(value, defaultNamespace)
	}
	return parseListForm(value, defaultNamespace)
}

// parseListForm reads "name, ns/name, name@if, ns/name@if".
func parseListForm(value, defaultNamespace string) ([]NetworkSelection, error) {
	items := strings.Split(value, ",")
	if len(items) > MaxNetworkSelections {
		return nil, fmt.Errorf("it names %d networks, more than the limit of %d", len(items), MaxNetworkSelections)
	}
	sels := make([]NetworkSelection, 0, len(items))
	for i, item := range items {
		item = strings.TrimSpace(item)
		sel, err := parseListItem(item, defaultNamespace)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%q): %w", i+1, truncate(item, 80), err)
		}
		sels = append(sels, sel)
	}
	return sels, nil
}

func parseListItem(item, defaultNamespace string) (NetworkSelection, error) {
	if item == "" {
		return NetworkSelection{}, fmt.Errorf("the entry is empty (a stray comma?)")
	}
	if strings.Count(item, "/") > 1 {
		return NetworkSelection{}, fmt.Errorf("more than one \"/\"; the form is namespace/name@interface")
	}
	if strings.Count(item, "@") > 1 {
		return NetworkSelection{}, fmt.Errorf("more than one \"@\"; the form is namespace/name@interface")
	}
	sel := NetworkSelection{Namespace: defaultNamespace}
	rest := item
	if ns, name, ok := strings.Cut(item, "/"); ok {
		// Multus treats "/name" as the default namespace; so do we.
		if ns = strings.TrimSpace(ns); ns != "" {
			sel.Namespace = ns
		}
		rest = name
	}
	name, ifName, hasIf := strings.Cut(rest, "@")
	sel.Name = strings.TrimSpace(name)
	if hasIf {
		sel.InterfaceRequest = strings.TrimSpace(ifName)
		if sel.InterfaceRequest == "" {
			return NetworkSelection{}, fmt.Errorf("nothing after \"@\"; leave out the \"@\" to get the default interface name")
		}
	}
	return sel, sel.Validate()
}

// jsonObject is one decoded JSON object whose values are decoded key by key, so
// that a type error can name its key.
type jsonObject map[string]json.RawMessage

// parseJSONForm reads a JSON list of selection objects. A single object is taken
// as a list of one: it is unambiguous, hand-written annotations get it wrong
// often, and refusing it would only make the pod fail.
func parseJSONForm(value, defaultNamespace string) ([]NetworkSelection, error) {
	trimmed := strings.TrimSpace(value)
	var raws []json.RawMessage
	switch {
	case strings.HasPrefix(trimmed, "{"):
		raws = []json.RawMessage{json.RawMessage(trimmed)}
		if !json.Valid(raws[0]) {
			return nil, fmt.Errorf("not valid JSON: %s; several objects go in a list: [{...}, {...}]", describeSyntax(trimmed))
		}
	case strings.HasPrefix(trimmed, "["):
		if err := json.Unmarshal([]byte(trimmed), &raws); err != nil {
			return nil, fmt.Errorf("not valid JSON: %s", describeSyntax(trimmed))
		}
	default:
		return nil, fmt.Errorf("value %q contains '[', '{' or '\"', so it must be a JSON list of objects, but it does not start with '['", truncate(trimmed, 64))
	}
	if len(raws) > MaxNetworkSelections {
		return nil, fmt.Errorf("it names %d networks, more than the limit of %d", len(raws), MaxNetworkSelections)
	}
	sels := make([]NetworkSelection, 0, len(raws))
	for i, raw := range raws {
		var obj jsonObject
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("entry %d is %s, not a JSON object", i+1, describeValue(raw))
		}
		sel, err := decodeSelection(obj, defaultNamespace)
		if err != nil {
			if sel.Name != "" {
				return nil, fmt.Errorf("entry %d (%q): %w", i+1, truncate(sel.Name, 80), err)
			}
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		sels = append(sels, sel)
	}
	return sels, nil
}

// decodeSelection decodes and validates one JSON entry. On error the returned
// selection still carries the name, when it could be read, for the message.
func decodeSelection(obj jsonObject, defaultNamespace string) (NetworkSelection, error) {
	sel := NetworkSelection{}
	if _, err := obj.decode("name", "a string", &sel.Name); err != nil {
		return sel, err
	}
	if sel.Name == "" {
		return sel, fmt.Errorf("\"name\" is missing or empty")
	}
	var portMaps []jsonObject
	var bandwidth jsonObject
	fields := []struct {
		key, want string
		dst       any
	}{
		{"namespace", "a string", &sel.Namespace},
		{"interface", "a string", &sel.InterfaceRequest},
		{"ips", "a list of strings", &sel.IPs},
		{"mac", "a string", &sel.MAC},
		{"infiniband-guid", "a string", &sel.InfinibandGUID},
		{"portMappings", "a list of objects", &portMaps},
		{"bandwidth", "an object", &bandwidth},
		{"deviceID", "a string", &sel.DeviceID},
		{"default-route", "a list of strings", &sel.DefaultRoute},
		{"ipam-claim-reference", "a string", &sel.IPAMClaimReference},
	}
	for _, f := range fields {
		if _, err := obj.decode(f.key, f.want, f.dst); err != nil {
			return sel, err
		}
	}
	if sel.Namespace == "" {
		sel.Namespace = defaultNamespace
	}
	// "interfaceRequest" is the pre-3.2 Multus spelling, still honoured by Multus.
	if sel.InterfaceRequest == "" {
		if _, err := obj.decode("interfaceRequest", "a string", &sel.InterfaceRequest); err != nil {
			return sel, err
		}
	}
	if raw, ok := obj.lookup("cni-args"); ok {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&sel.CNIArgs); err != nil || sel.CNIArgs == nil {
			return sel, fmt.Errorf("%q must be an object, got %s", "cni-args", describeValue(raw))
		}
	}
	if bandwidth != nil {
		bw, err := decodeBandwidth(bandwidth)
		if err != nil {
			return sel, fmt.Errorf("%q: %w", "bandwidth", err)
		}
		sel.Bandwidth = &bw
	}
	for i, pm := range portMaps {
		p, err := decodePortMapping(pm)
		if err != nil {
			return sel, fmt.Errorf("%q[%d]: %w", "portMappings", i, err)
		}
		sel.PortMappings = append(sel.PortMappings, p)
	}
	return sel, sel.Validate()
}

func decodePortMapping(obj jsonObject) (PortMapping, error) {
	var p PortMapping
	fields := []struct {
		key, want string
		dst       any
	}{
		{"hostPort", "an integer", &p.HostPort},
		{"containerPort", "an integer", &p.ContainerPort},
		{"protocol", "a string", &p.Protocol},
		{"hostIP", "a string", &p.HostIP},
	}
	for _, f := range fields {
		if _, err := obj.decode(f.key, f.want, f.dst); err != nil {
			return p, err
		}
	}
	// Normalised here so that Validate, the record and the plugin all see one
	// spelling; kubelet sends lower case too.
	p.Protocol = strings.ToLower(p.Protocol)
	if p.Protocol == "" {
		p.Protocol = "tcp"
	}
	return p, nil
}

func decodeBandwidth(obj jsonObject) (Bandwidth, error) {
	var b Bandwidth
	fields := []struct {
		key string
		dst *int64
	}{
		{"ingressRate", &b.IngressRate},
		{"ingressBurst", &b.IngressBurst},
		{"egressRate", &b.EgressRate},
		{"egressBurst", &b.EgressBurst},
	}
	for _, f := range fields {
		if _, err := obj.decode(f.key, "an integer", f.dst); err != nil {
			return b, err
		}
	}
	return b, nil
}

// lookup finds key, preferring an exact match and otherwise taking a
// case-insensitive one, as encoding/json does for Multus's structs: a key that
// Multus honours must not be silently dropped here. A JSON null counts as absent.
func (o jsonObject) lookup(key string) (json.RawMessage, bool) {
	raw, ok := o[key]
	if !ok {
		var folded []string
		for k := range o {
			if strings.EqualFold(k, key) {
				folded = append(folded, k)
			}
		}
		if len(folded) == 0 {
			return nil, false
		}
		sort.Strings(folded) // deterministic when several spellings are present
		raw = o[folded[0]]
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, false
	}
	return raw, true
}

// decode unmarshals key into dst, if present, with an error that names the key.
func (o jsonObject) decode(key, want string, dst any) (bool, error) {
	raw, ok := o.lookup(key)
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return false, fmt.Errorf("%q must be %s, got %s", key, want, describeValue(raw))
	}
	return true, nil
}

// describeValue names the kind of a JSON value and shows it, shortened, for an
// error message.
func describeValue(raw json.RawMessage) string {
	var buf bytes.Buffer
	shown := string(raw)
	if json.Compact(&buf, raw) == nil {
		shown = buf.String()
	}
	kind := "JSON"
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '"':
		kind = "string"
	case t[0] == '{':
		kind = "object"
	case t[0] == '[':
		kind = "list"
	case t[0] == 't' || t[0] == 'f':
		kind = "boolean"
	case t[0] == 'n':
		kind = "null"
	default:
		kind = "number"
	}
	return kind + " " + truncate(shown, 40)
}

// describeSyntax explains why value is not JSON, with the byte offset.
func describeSyntax(value string) string {
	var v any
	err := json.Unmarshal([]byte(value), &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "the top level must be a list of objects"
}
