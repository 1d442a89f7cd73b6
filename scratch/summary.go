package scratch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/manifold-cni/manifold/netconf"
)

// Summary is what a record says about a container without its configs: the
// pod, and each attachment's interface and the annotation entry it answers.
// It is all that the node daemon's hot-plug needs to tell whether a pod's
// networks annotation asks for a change (docs/hotplug.md). A record's
// configs may add up to MaxRecordBytes; its summary is a few hundred bytes,
// and is written ahead of them, with a checksum of its own, so that reading
// it costs that much whatever the record's size (Store.LoadSummary).
type Summary struct {
	ContainerID string         `json:"containerID"`
	Pod         netconf.PodRef `json:"pod"`
	// HasConfig says that the record keeps manifold's config (Record.Config):
	// records written before hot-plug do not, and their pods are not
	// hot-plugged.
	HasConfig   bool                `json:"hasConfig,omitempty"`
	Attachments []AttachmentSummary `json:"attachments"`
}

// AttachmentSummary is one attachment of a Summary.
type AttachmentSummary struct {
	IfName    string `json:"ifname"`
	IsDefault bool   `json:"default,omitempty"`
	// Request is netconf.Attachment.Request.
	Request string `json:"request,omitempty"`
}

// Summarize is the summary of r.
func Summarize(r *Record) *Summary {
	s := &Summary{ContainerID: r.ContainerID, Pod: r.Pod, HasConfig: len(r.Config) > 0, Attachments: make([]AttachmentSummary, len(r.Attachments))}
	for i, a := range r.Attachments {
		s.Attachments[i] = AttachmentSummary{IfName: a.IfName, IsDefault: a.IsDefault, Request: a.Request}
	}
	return s
}

// encodeSummary is the summary's JSON and its checksum.
func encodeSummary(r *Record) (json.RawMessage, string, error) {
	b, err := json.Marshal(Summarize(r))
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// LoadSummary reads a container's summary: (nil, nil) when there is no
// record. It reads the record's first bytes only; a record written before
// summaries were, or one whose summary does not check out, is read whole and
// summarised, with Load's errors.
func (s *Store) LoadSummary(containerID string) (*Summary, error) {
	if err := ValidateContainerID(containerID); err != nil {
		return nil, err
	}
	f, err := openRead(s.Path(containerID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load scratch record %s: %w", s.Path(containerID), err)
	}
	sum, ok := readSummary(io.LimitReader(f, MaxRecordBytes+1))
	f.Close()
	if ok && sum.ContainerID == containerID {
		return sum, nil
	}
	r, err := s.Load(containerID)
	if err != nil || r == nil {
		return nil, err
	}
	return Summarize(r), nil
}

// readSummary reads an envelope's keys up to its summary, and no further:
// Encode writes "version", "summary" and "summarySha256" before the
// record's checksum and the record. ok is false when they are not there, in
// that place, intact.
func readSummary(r io.Reader) (*Summary, bool) {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var version int
	var raw json.RawMessage
	var sum string
	for version == 0 || raw == nil || sum == "" {
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return nil, false
		}
		var dst any
		switch key {
		case "version":
			dst = &version
		case "summary":
			dst = &raw
		case "summarySha256":
			dst = &sum
		default:
			return nil, false // past where a summary would be
		}
		if err := dec.Decode(dst); err != nil {
			return nil, false
		}
	}
	got := sha256.Sum256(raw)
	if version != FormatVersion || hex.EncodeToString(got[:]) != sum {
		return nil, false
	}
	var s Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, false
	}
	return &s, true
}
