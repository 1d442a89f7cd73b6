package devinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Device types of the spec. Each names the object in the file that holds the
// type's details ("pci": {"pci-address": …}, …).
const (
	TypePCI       = "pci"
	TypeVDPA      = "vdpa"
	TypeVhostUser = "vhost-user"
	TypeMemif     = "memif"
)

// MaxFileBytes bounds a device-info file. Real ones are a few hundred bytes;
// the bound keeps a bad file from filling the pod's annotation or memory.
const MaxFileBytes = 64 << 10

// ErrInvalid is wrapped by the errors about a device-info file whose content
// does not follow the spec.
var ErrInvalid = errors.New("invalid device info")

// versionPattern is the spec's "major.minor.patch" (e.g. "1.1.0").
var versionPattern = regexp.MustCompile(`^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}$`)

// Info is a validated device-info document.
type Info struct {
	// Type is one of TypePCI, TypeVDPA, TypeVhostUser and TypeMemif.
	Type string
	// Version is the spec version the writer followed, e.g. "1.1.0".
	Version string
	// Raw is the whole document, compacted, for the device-info entry of
	// network-status. Fields this package does not know are kept: the spec
	// adds fields in minor versions, and the pod's reader may know them.
	Raw json.RawMessage
}

// Parse validates a device-info document: a JSON object whose "type" is one
// of the spec's four, with a "version" of the form major.minor.patch, and, if
// the object named by the type (e.g. "pci") is there, an object. A missing
// type object is accepted, as the spec's own Go types make it optional.
func Parse(b []byte) (*Info, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(b), MaxFileBytes)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrInvalid, err)
	}
	var info Info
	if err := stringField(fields, "type", &info.Type); err != nil {
		return nil, err
	}
	if err := stringField(fields, "version", &info.Version); err != nil {
		return nil, err
	}
	switch info.Type {
	case TypePCI, TypeVDPA, TypeVhostUser, TypeMemif:
	default:
		return nil, fmt.Errorf("%w: type %q is none of %s, %s, %s and %s", ErrInvalid, info.Type, TypePCI, TypeVDPA, TypeVhostUser, TypeMemif)
	}
	if !versionPattern.MatchString(info.Version) {
		return nil, fmt.Errorf("%w: version %q is not of the form 1.1.0", ErrInvalid, info.Version)
	}
	if details, ok := fields[info.Type]; ok {
		if d := bytes.TrimSpace(details); len(d) == 0 || d[0] != '{' {
			return nil, fmt.Errorf("%w: %q is not an object", ErrInvalid, info.Type)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	info.Raw = compact.Bytes()
	return &info, nil
}

func stringField(fields map[string]json.RawMessage, key string, into *string) error {
	raw, ok := fields[key]
	if !ok {
		return fmt.Errorf("%w: no %q", ErrInvalid, key)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%w: %q is not a string", ErrInvalid, key)
	}
	return nil
}

// PCIDocument is the Device Info document (spec v1.1.0) of a PCI device
// known only by its address: what a DRA device's standard pciBusID
// attribute says of it.
func PCIDocument(address string) ([]byte, error) {
	return json.Marshal(map[string]any{"type": TypePCI, "version": "1.1.0", TypePCI: map[string]string{"pci-address": address}})
}
