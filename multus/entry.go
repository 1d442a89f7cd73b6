package multus

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// rawEntry is one element of Multus's record, with only the keys we read. Go's
// JSON decoding matches keys without regard to case, as Multus's own did.
type rawEntry struct {
	Conf                  json.RawMessage `json:"Conf"`
	ConfList              json.RawMessage `json:"ConfList"`
	CNINetworkConfigList  *rawConfigList  `json:"CNINetworkConfigList"`
	Name                  string          `json:"Name"`
	IfnameRequest         string          `json:"ifnameRequest"`
	MacRequest            string          `json:"macRequest"`
	IPRequest             json.RawMessage `json:"ipRequest"`
	InfinibandGUIDRequest string          `json:"infinibandGUIDRequest"`
	DeviceID              string          `json:"deviceID"`
	GatewayRequest        []string        `json:"default-route"`
	Bytes                 json.RawMessage `json:"Bytes"`

	// decodeErr is set when a field has a type Multus never wrote: the entry is
	// reported, and the others are still read.
	decodeErr error
}

// rawConfigList is libcni's NetworkConfigList as Go encodes it.
type rawConfigList struct {
	Name       string          `json:"Name"`
	CNIVersion string          `json:"CNIVersion"`
	Plugins    []rawPlugin     `json:"Plugins"`
	Bytes      json.RawMessage `json:"Bytes"`
}

type rawPlugin struct {
	Bytes json.RawMessage `json:"Bytes"`
}

func (l *rawConfigList) filled() bool {
	return l != nil && (!isNull(l.Bytes) || len(l.Plugins) > 0)
}

// decodeRecord parses a record: a JSON list of objects, each with at least one
// of the keys Multus v3/v4 always writes.
func decodeRecord(b []byte) ([]rawEntry, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrCorrupt)
	}
	if !json.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not valid JSON (%d bytes)", ErrCorrupt, len(b))
	}
	var objs []map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &objs); err != nil {
		return nil, fmt.Errorf("%w: not a JSON list of objects", ErrUnknownFormat)
	}
	entries := make([]rawEntry, len(objs))
	for i, o := range objs {
		if !hasAnyKey(o, "Bytes", "Conf", "ConfList") {
			return nil, fmt.Errorf("%w: entry %d has none of \"Bytes\", \"Conf\", \"ConfList\"", ErrUnknownFormat, i)
		}
		raw, _ := json.Marshal(o)
		if err := json.Unmarshal(raw, &entries[i]); err != nil {
			entries[i] = rawEntry{decodeErr: err}
			json.Unmarshal(o["Name"], &entries[i].Name) // for naming it, if it can
		}
	}
	return entries, nil
}

func hasAnyKey(o map[string]json.RawMessage, keys ...string) bool {
	for k := range o {
		for _, want := range keys {
			if strings.EqualFold(k, want) {
				return true
			}
		}
	}
	return false
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// configBytes reads a field that holds a JSON config: normally a base64 string
// (Go's encoding of []byte), but a string with JSON text or a plain object is
// taken too. It returns nil for an absent or null field.
func configBytes(raw json.RawMessage) ([]byte, error) {
	if isNull(raw) {
		return nil, nil
	}
	t := bytes.TrimSpace(raw)
	if t[0] == '{' {
		return t, nil
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return nil, fmt.Errorf("neither a string nor an object")
	}
	if s == "" {
		return nil, nil
	}
	if dec, err := base64.StdEncoding.DecodeString(s); err == nil && looksLikeObject(dec) {
		return dec, nil
	}
	if looksLikeObject([]byte(s)) {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("neither base64 of a JSON object nor JSON text")
}

func looksLikeObject(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// ipRequests reads "ipRequest": a string in early Multus v3, a list later.
func ipRequests(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err != nil {
		return nil, fmt.Errorf("\"ipRequest\" is neither a string nor a list of strings")
	}
	if one == "" {
		return nil, nil
	}
	return []string{one}, nil
}

// typedName is the network name from the typed copies, for matching the cache
// when Bytes is unusable.
func (e *rawEntry) typedName() string {
	for _, raw := range []json.RawMessage{e.ConfList, e.Conf} {
		var v struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &v) == nil && v.Name != "" {
			return v.Name
		}
	}
	if e.CNINetworkConfigList != nil && e.CNINetworkConfigList.Name != "" {
		return e.CNINetworkConfigList.Name
	}
	if e.Name != "" && !strings.Contains(e.Name, "/") {
		return e.Name
	}
	return ""
}

// nad is "namespace/name" when the entry came from a NetworkAttachmentDefinition;
// a CNI network name cannot hold a '/'.
func (e *rawEntry) nad() string {
	if strings.Contains(e.Name, "/") {
		return e.Name
	}
	return ""
}

// lossyBytes says whether b is, as JSON, the entry's typed ConfList: Multus
// makes Bytes that way only by re-encoding, which drops the plugins' own fields.
func (e *rawEntry) lossyBytes(b []byte) bool {
	if isNull(e.ConfList) {
		return false
	}
	var typed, got any
	if json.Unmarshal(e.ConfList, &typed) != nil || json.Unmarshal(b, &got) != nil {
		return false
	}
	m, ok := typed.(map[string]any)
	if !ok || m["plugins"] == nil {
		return false
	}
	return reflect.DeepEqual(typed, got)
}

// fromConfigList rebuilds the original conflist from CNINetworkConfigList: the
// list-level keys from its Bytes, the plugins from each plugin's raw Bytes
// (libcni appends plugins loaded from a subdirectory to Plugins only), and the
// per-plugin keys Multus added to the record's Bytes afterwards.
func (e *rawEntry) fromConfigList(recordBytes []byte) ([]byte, error) {
	l := e.CNINetworkConfigList
	top := map[string]json.RawMessage{}
	listBytes, err := configBytes(l.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CNINetworkConfigList.Bytes: %w", err)
	}
	if listBytes != nil {
		if err := json.Unmarshal(listBytes, &top); err != nil {
			return nil, fmt.Errorf("CNINetworkConfigList.Bytes: %w", err)
		}
	}
	if _, ok := top["name"]; !ok && l.Name != "" {
		top["name"], _ = json.Marshal(l.Name)
	}
	if _, ok := top["cniVersion"]; !ok && l.CNIVersion != "" {
		top["cniVersion"], _ = json.Marshal(l.CNIVersion)
	}
	if len(l.Plugins) > 0 {
		plugins := make([]json.RawMessage, 0, len(l.Plugins))
		for i, p := range l.Plugins {
			pb, err := configBytes(p.Bytes)
			if err != nil || pb == nil {
				return nil, fmt.Errorf("CNINetworkConfigList plugin %d has no usable Bytes", i)
			}
			plugins = append(plugins, pb)
		}
		top["plugins"], _ = json.Marshal(plugins)
	}
	if _, ok := top["plugins"]; !ok {
		return nil, fmt.Errorf("CNINetworkConfigList has no plugins")
	}
	if recordBytes != nil {
		if err := carryOver(top, recordBytes); err != nil {
			return nil, err
		}
	}
	return json.Marshal(top)
}

// carryOver copies into the rebuilt list the keys Multus adds per attachment
// (a device from a device plugin, the annotation's cni-args) from the record's
// Bytes, plugin by plugin. With a different plugin count there is no safe
// pairing, and the rebuilt list is kept as it is.
func carryOver(top map[string]json.RawMessage, recordBytes []byte) error {
	var rec struct {
		Plugins []map[string]json.RawMessage `json:"plugins"`
	}
	var plugins []map[string]json.RawMessage
	if json.Unmarshal(recordBytes, &rec) != nil || json.Unmarshal(top["plugins"], &plugins) != nil ||
		len(rec.Plugins) != len(plugins) {
		return nil
	}
	for i, hk := range rec.Plugins {
		for _, k := range []string{"deviceID", "pciBusID"} {
			if v, ok := hk[k]; ok {
				plugins[i][k] = v
			}
		}
		if hkArgs, ok := hk["args"]; ok {
			merged, err := mergeCNIArgs(plugins[i]["args"], hkArgs)
			if err != nil {
				return fmt.Errorf("plugin %d \"args\": %w", i, err)
			}
			plugins[i]["args"] = merged
		}
	}
	var err error
	top["plugins"], err = json.Marshal(plugins)
	return err
}

// mergeCNIArgs puts the keys of add's "cni" object over base's.
func mergeCNIArgs(base, add json.RawMessage) (json.RawMessage, error) {
	args := map[string]json.RawMessage{}
	if !isNull(base) {
		if err := json.Unmarshal(base, &args); err != nil {
			return nil, err
		}
	}
	var addArgs map[string]json.RawMessage
	if err := json.Unmarshal(add, &addArgs); err != nil {
		return nil, err
	}
	cni := map[string]json.RawMessage{}
	if !isNull(args["cni"]) {
		if err := json.Unmarshal(args["cni"], &cni); err != nil {
			return nil, err
		}
	}
	var addCNI map[string]json.RawMessage
	if !isNull(addArgs["cni"]) {
		if err := json.Unmarshal(addArgs["cni"], &addCNI); err != nil {
			return nil, err
		}
	}
	for k, v := range addCNI {
		cni[k] = v
	}
	if len(cni) > 0 {
		b, err := json.Marshal(cni)
		if err != nil {
			return nil, err
		}
		args["cni"] = b
	}
	return json.Marshal(args)
}
