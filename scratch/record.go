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

// FormatVersion is the version of the on-disk format that Encode writes. A
// record of another version is read by the reader for that version (readers),
// or refused with ErrUnknownVersion: never guessed at, and never called corrupt.
const FormatVersion = 1

// MaxRecordBytes is the one size limit of a record, encoded: Encode refuses to
// write what Decode would refuse to read. A record holds a few configs and is
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
	// Config is manifold's own config as the ADD got it, without the
	// runtime's runtimeConfig: what the node daemon's hot-plug works with
	// (docs/hotplug.md). Empty in records written before hot-plug, whose
	// pods are then not hot-plugged.
	Config json.RawMessage `json:"config,omitempty"`
}

// envelopeV1 wraps a version 1 record with a checksum of the payload, so a torn
// or hand-edited file is detected instead of being half believed. The
// record's Summary, with a checksum of its own, comes first (encoding/json
// writes the fields in this order), so that LoadSummary can stop reading
// there; records written before it have none, and readers that predate it
// ignore it.
type envelopeV1 struct {
	Version    int             `json:"version"`
	Summary    json.RawMessage `json:"summary,omitempty"`
	SummarySum string          `json:"summarySha256,omitempty"`
	Checksum   string          `json:"sha256"`
	Record     json.RawMessage `json:"record"`
}

// Errors that Decode and Encode wrap.
var (
	// ErrCorrupt: the record is damaged (torn, truncated, edited, too large
	// to have been written) and cannot be trusted.
	ErrCorrupt = errors.New("scratch record is corrupt")
	// ErrUnknownVersion: the record is intact as far as can be told, but of
	// a format version this manifold has no reader for (written by a newer
	// or an older manifold).
	ErrUnknownVersion = errors.New("scratch record has a format version this manifold cannot read")
	// ErrTooLarge: Encode refuses a record larger than MaxRecordBytes.
	ErrTooLarge = errors.New("scratch record is too large")
)

// readers decode the payload of each format version this manifold can read.
var readers = map[int]func(b []byte) (*Record, error){
	1: decodeV1,
}

// Encode serialises a record with its version and checksum. It refuses a
// record that Decode would refuse, so that whatever is written can be read back.
func Encode(r *Record) ([]byte, error) {
	if err := check(r); err != nil {
		return nil, fmt.Errorf("encode scratch record for %s: %w", r.ContainerID, err)
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode scratch record for %s: %w", r.ContainerID, err)
	}
	summary, summarySum, err := encodeSummary(r)
	if err != nil {
		return nil, fmt.Errorf("encode scratch record for %s: %w", r.ContainerID, err)
	}
	sum := sha256.Sum256(payload)
	b, err := json.Marshal(envelopeV1{Version: FormatVersion, Summary: summary, SummarySum: summarySum, Checksum: hex.EncodeToString(sum[:]), Record: payload})
	if err != nil {
		return nil, fmt.Errorf("encode scratch record for %s: %w", r.ContainerID, err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("encode scratch record for %s: %w: %d bytes with %d networks, more than the limit of %d",
			r.ContainerID, ErrTooLarge, len(b), len(r.Attachments), MaxRecordBytes)
	}
	return b, nil
}

// Decode parses and verifies a record of any version that has a reader. A
// damaged record yields an error wrapping ErrCorrupt; one of a version without
// a reader, an error wrapping ErrUnknownVersion that names the version.
func Decode(b []byte) (*Record, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrCorrupt, len(b), MaxRecordBytes)
	}
	// Every version's envelope is a JSON object with a numeric "version"; the
	// rest is that version's reader's business.
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if head.Version == nil {
		return nil, fmt.Errorf("%w: no format version", ErrCorrupt)
	}
	read, ok := readers[*head.Version]
	if !ok {
		return nil, fmt.Errorf("%w: format version %d (this manifold reads version %d)", ErrUnknownVersion, *head.Version, FormatVersion)
	}
	r, err := read(b)
	if err != nil {
		return nil, err
	}
	if err := check(r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return r, nil
}

func decodeV1(b []byte) (*Record, error) {
	var env envelopeV1
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	sum := sha256.Sum256(env.Record)
	if hex.EncodeToString(sum[:]) != env.Checksum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r := &Record{}
	if err := json.Unmarshal(env.Record, r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return r, nil
}

// check is what every record must satisfy, written or read.
func check(r *Record) error {
	if err := ValidateContainerID(r.ContainerID); err != nil {
		return err
	}
	for i, a := range r.Attachments {
		if a.Network == "" || len(a.Config) == 0 {
			return fmt.Errorf("attachment %d has no network or config", i)
		}
		if err := netconf.ValidateIfName(a.IfName); err != nil {
			return fmt.Errorf("attachment %d: %v", i, err)
		}
	}
	return nil
}
