// Package scratch keeps the on-disk record of what manifold attached to each
// container, so that DEL, CHECK and GC work without the API server (DESIGN §7).
package scratch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/manifold-cni/manifold/netconf"
)

// FormatVersion is the version of the on-disk format. A reader refuses a record of
// another version rather than guess at its meaning.
const FormatVersion = 1

// MaxRecordBytes caps what Decode accepts; a record holds a few configs and is
// normally a few KiB.
const MaxRecordBytes = 16 << 20

// Record is everything DEL needs to undo an ADD.
type Record struct {
	ContainerID string `json:"containerID"`
	NetNS       string `json:"netns"`
	// Pod is the pod the ADD was for, when the runtime said.
	Pod netconf.PodRef `json:"pod"`
	// RuntimeArgs are the runtime's CNI_ARGS, forwarded to every delegate.
	RuntimeArgs [][2]string `json:"runtimeArgs,omitempty"`
	// Attachments are in attach order; DEL walks them backwards.
	Attachments []netconf.Attachment `json:"attachments"`
}

// envelope wraps a record with its version and a checksum of the payload, so a torn
// or hand-edited file is detected instead of being half believed.
type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"sha256"`
	Record   json.RawMessage `json:"record"`
}

// ErrCorrupt is returned (wrapped) by Decode for a record that cannot be trusted.
var ErrCorrupt = errors.New("scratch record is corrupt")

// Encode serialises a record with its version and checksum.
func Encode(r *Record) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode scratch record for %s: %w", r.ContainerID, err)
	}
	sum := sha256.Sum256(payload)
	return json.Marshal(envelope{Version: FormatVersion, Checksum: hex.EncodeToString(sum[:]), Record: payload})
}

// Decode parses and verifies a record. Any damage yields an error wrapping ErrCorrupt.
func Decode(b []byte) (*Record, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrCorrupt, len(b), MaxRecordBytes)
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if env.Version != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrCorrupt, env.Version, FormatVersion)
	}
	sum := sha256.Sum256(env.Record)
	if hex.EncodeToString(sum[:]) != env.Checksum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r := &Record{}
	if err := json.Unmarshal(env.Record, r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := ValidateContainerID(r.ContainerID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	for i, a := range r.Attachments {
		if a.Network == "" || len(a.Config) == 0 {
			return nil, fmt.Errorf("%w: attachment %d has no network or config", ErrCorrupt, i)
		}
		if err := netconf.ValidateIfName(a.IfName); err != nil {
			return nil, fmt.Errorf("%w: attachment %d: %v", ErrCorrupt, i, err)
		}
	}
	return r, nil
}
