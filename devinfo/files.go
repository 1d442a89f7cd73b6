package devinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// Outcome says what Copy did.
type Outcome int

const (
	// Copied: the attachment's file was written from the device plugin's.
	Copied Outcome = iota
	// AlreadyThere: the attachment's file existed with the same document (a
	// retried ADD), and was left as it was.
	AlreadyThere
	// NoDevicePluginFile: the device plugin wrote no file for the device
	// (many do not), so nothing was written. Not an error: the attachment
	// simply has no device-info, or its delegate writes one itself.
	NoDevicePluginFile
	// Written: the attachment's file was written from a document manifold
	// made (a DRA device's, from its ResourceSlice).
	Written
)

func (o Outcome) String() string {
	switch o {
	case Copied:
		return "copied"
	case AlreadyThere:
		return "already there"
	case NoDevicePluginFile:
		return "no device-plugin file"
	case Written:
		return "written"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// ErrConflict is wrapped by Copy's error when the attachment's file already
// exists with a different document. That is another device's description
// under this attachment's name (a record left over from a sandbox whose DEL
// never ran, or a delegate that wrote early), and neither can be trusted to
// be this device's, so it is not overwritten; removing it (Remove) and
// copying again is the caller's call.
var ErrConflict = errors.New("device-info file exists with another content")

// Copy copies the device plugin's file for deviceID of resource to att's own
// file, before att's delegate runs. The copy is validated (Parse), written
// mode 0444 as the spec asks, and appears whole or not at all: it is written
// to a temp file and then hard-linked into place, which, unlike a rename,
// fails when the name is taken, so an existing file is never overwritten.
// Directories are created as needed.
func (d Dir) Copy(resource, deviceID string, att Attachment) (Outcome, error) {
	src, err := d.DevicePluginPath(resource, deviceID)
	if err != nil {
		return 0, err
	}
	dst, err := d.AttachmentPath(att)
	if err != nil {
		return 0, err
	}
	b, err := safefile.ReadNoFollow(src, MaxFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return NoDevicePluginFile, nil
	}
	if err != nil {
		return 0, fmt.Errorf("copy device info for %s: %w", att, err)
	}
	info, err := Parse(b)
	if err != nil {
		return 0, fmt.Errorf("copy device info for %s: %s: %w", att, src, err)
	}
	if err := place(dst, b, info, att); err != nil {
		if errors.Is(err, errSame) {
			return AlreadyThere, nil
		}
		return 0, err
	}
	return Copied, nil
}

// Write writes doc, a document manifold made for a device that no device
// plugin describes (a DRA device), as att's file, by the rules of Copy: a
// valid document, mode 0444, whole or not at all, never over another one.
func (d Dir) Write(doc []byte, att Attachment) (Outcome, error) {
	dst, err := d.AttachmentPath(att)
	if err != nil {
		return 0, err
	}
	info, err := Parse(doc)
	if err != nil {
		return 0, fmt.Errorf("write device info for %s: %w", att, err)
	}
	if err := place(dst, doc, info, att); err != nil {
		if errors.Is(err, errSame) {
			return AlreadyThere, nil
		}
		return 0, err
	}
	return Written, nil
}

// errSame is place's answer when dst already holds the document.
var errSame = errors.New("already there")

// place links the document b (parsed as info) to dst; a dst that holds the
// same document already is errSame, one that holds another ErrConflict.
func place(dst string, b []byte, info *Info, att Attachment) error {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write device info for %s: %w", att, err)
	}
	err := linkNew(dir, dst, b)
	if errors.Is(err, os.ErrExist) {
		if _, err := compareExisting(dst, info, att); err != nil {
			return err
		}
		return errSame
	}
	if err != nil {
		return fmt.Errorf("write device info for %s to %s: %w", att, dst, err)
	}
	return nil
}

// compareExisting decides about a file that was there before Copy: the same
// document (whitespace aside) is a retried ADD's copy and fine.
func compareExisting(dst string, want *Info, att Attachment) (Outcome, error) {
	b, err := safefile.ReadNoFollow(dst, MaxFileBytes)
	if err != nil {
		return 0, fmt.Errorf("copy device info for %s: it exists, and: %w", att, err)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, b) == nil && bytes.Equal(compact.Bytes(), want.Raw) {
		return AlreadyThere, nil
	}
	return 0, fmt.Errorf("copy device info for %s: %s: %w", att, dst, ErrConflict)
}

// linkNew writes b to a temp file in dir, makes it read-only and durable, and
// links it to dst, failing with an os.ErrExist error if dst exists.
func linkNew(dir, dst string, b []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		// The mode is set on the file, not asked of OpenFile, so that the
		// umask cannot take the group's and others' read away.
		err = tmp.Chmod(0o444)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp.Name(), dst)
}

// Read returns the validated document in att's file, after att's delegate
// ran, for the device-info entry of network-status; it is the device
// plugin's copy or what the delegate wrote instead. No file gives nil and no
// error. A file that is not valid is an error, which a caller would best log
// and leave out of network-status rather than fail a working attachment.
func (d Dir) Read(att Attachment) (*Info, error) {
	path, err := d.AttachmentPath(att)
	if err != nil {
		return nil, err
	}
	b, err := safefile.ReadNoFollow(path, MaxFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read device info for %s: %w", att, err)
	}
	info, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read device info for %s: %s: %w", att, path, err)
	}
	return info, nil
}

// Remove deletes att's file, on DEL. A file that is not there is fine: DEL
// runs more than once, and most attachments never had one.
func (d Dir) Remove(att Attachment) error {
	path, err := d.AttachmentPath(att)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove device info for %s: %w", att, err)
	}
	return nil
}
