// Package devinfo handles the files of the Network Plumbing Working Group's
// Device Info spec (v1.1), through which a device plugin tells the network
// side which device it handed a pod, and the network side tells the pod (via
// the device-info entry of its network-status annotation).
//
// A device plugin writes <base>/dp/<resource>-<deviceID>-device.json when it
// allocates a device. Before a delegate's ADD, that file is copied to the
// attachment's own file, <base>/cni/<network>-<containerID>_<ifname>, where a
// delegate may find it or replace it with its own. After the ADD, the
// attachment's file is what goes into network-status; on DEL it is removed.
// In every name, a "/" of a part is written as "-", as the spec says.
//
// The network name and the resource name come from a NAD, which a NAD author
// writes, so every part is checked before it becomes a path component.
package devinfo

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// DefaultBaseDir is the spec's directory; device plugins write under it
// without being told, so it only changes in tests.
const DefaultBaseDir = "/var/run/k8s.cni.cncf.io/devinfo"

const (
	dpSubdir  = "dp"
	cniSubdir = "cni"
	// maxPartLen bounds a resource name, device ID or network name: a
	// qualified resource name or a namespaced NAD name is at most 253+1+63
	// characters, and nothing legitimate comes near the file-name limit.
	maxPartLen = 317
	// maxNameLen is the kernel's limit on one path component (NAME_MAX).
	maxNameLen = 255
)

// ErrBadName is wrapped by the errors about a part that cannot become a file
// name.
var ErrBadName = errors.New("not usable in a device-info file name")

// Dir is a device-info tree. The zero value is the spec's DefaultBaseDir.
type Dir struct {
	// Base is the tree's root; DefaultBaseDir if empty.
	Base string
}

// Attachment names one attachment's own device-info file: the network (the
// NAD as "namespace/name", or a CNI network name), the sandbox's container ID
// and the interface name in the pod.
type Attachment struct {
	Network, ContainerID, IfName string
}

func (a Attachment) String() string {
	return fmt.Sprintf("network %s, container %s, interface %s", a.Network, a.ContainerID, a.IfName)
}

func (d Dir) base() string {
	if d.Base == "" {
		return DefaultBaseDir
	}
	return d.Base
}

// DevicePluginPath is the file in which the device plugin describes the
// device deviceID of resource, e.g. "intel.com/sriov_netdevice" and
// "0000:af:06.0" give <base>/dp/intel.com-sriov_netdevice-0000:af:06.0-device.json.
func (d Dir) DevicePluginPath(resource, deviceID string) (string, error) {
	if err := checkPart("resource name", resource); err != nil {
		return "", err
	}
	if err := checkPart("device ID", deviceID); err != nil {
		return "", err
	}
	return d.join(dpSubdir, flatten(resource)+"-"+flatten(deviceID)+"-device.json")
}

// AttachmentPath is the attachment's own file, e.g. network "ns1/sriov-a",
// container "c0ffee" and interface "net1" give <base>/cni/ns1-sriov-a-c0ffee_net1.
// The container ID and the interface name are held to the same rules as
// everywhere else in manifold, so they hold no "/" to flatten.
func (d Dir) AttachmentPath(att Attachment) (string, error) {
	if err := checkPart("network name", att.Network); err != nil {
		return "", err
	}
	if err := scratch.ValidateContainerID(att.ContainerID); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadName, err)
	}
	if err := netconf.ValidateIfName(att.IfName); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadName, err)
	}
	return d.join(cniSubdir, flatten(att.Network)+"-"+att.ContainerID+"_"+att.IfName)
}

func (d Dir) join(subdir, name string) (string, error) {
	if len(name) > maxNameLen {
		return "", fmt.Errorf("device-info file name %.40q… is %d bytes, more than %d: %w", name, len(name), maxNameLen, ErrBadName)
	}
	return filepath.Join(d.base(), subdir, name), nil
}

// flatten writes each "/" as "-", as the spec does for resource names
// ("vendor/resource") and device IDs.
func flatten(s string) string { return strings.ReplaceAll(s, "/", "-") }

// checkPart refuses what must not reach a file name even after flattening: an
// empty part, "..", NUL and other control characters (a NUL ends the name in
// the kernel; a newline would split log lines), and parts longer than any
// real name. ".." is refused anywhere in the part, not only as a whole
// component: no real resource, device ID or network has it, and a check that
// needs no reasoning about where the part lands is one that stays right.
func checkPart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty: %w", what, ErrBadName)
	case len(s) > maxPartLen:
		return fmt.Errorf("%s %.40q… is %d bytes, more than %d: %w", what, s, len(s), maxPartLen, ErrBadName)
	case strings.Contains(s, ".."):
		return fmt.Errorf("%s %q contains \"..\": %w", what, s, ErrBadName)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%s %q contains %q: %w", what, s, r, ErrBadName)
		}
	}
	return nil
}
