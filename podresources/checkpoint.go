package podresources

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/manifold-cni/manifold/internal/safefile"
)

// DefaultCheckpoint is where the kubelet's device manager keeps its
// allocations with the default root dir.
const DefaultCheckpoint = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

// MaxCheckpointBytes bounds how much of the checkpoint is read. It holds one
// entry per container and resource, each with its allocation response, so even
// a dense node stays far below this.
const MaxCheckpointBytes = 32 << 20

// checkpointFile is the part of the device manager's checkpoint that is read
// here. The kubelet writes it as JSON with Go's default field names:
//
//	{"Data": {"PodDeviceEntries": [{"PodUID": "…", "ContainerName": "…",
//	  "ResourceName": "…", "DeviceIDs": {"0": ["…"]}, "AllocResp": "…"}],
//	  "RegisteredDevices": {"…": ["…"]}},
//	 "Checksum": 123, "BootID": "…"}
//
// DeviceIDs is keyed by NUMA node since Kubernetes 1.20, and a plain list
// before. The checksum is not checked: it is an FNV hash over a Go-syntax dump
// of the kubelet's own structs, and the kubelet replaces the file atomically,
// so a torn read shows up as bad JSON instead.
type checkpointFile struct {
	Data struct {
		PodDeviceEntries []checkpointEntry
	}
}

type checkpointEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     checkpointIDs
}

// checkpointIDs accepts both shapes of an entry's DeviceIDs.
type checkpointIDs []string

func (ids *checkpointIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*ids = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		*ids = list
		return nil
	}
	var perNUMA map[string][]string
	if err := json.Unmarshal(b, &perNUMA); err != nil {
		return fmt.Errorf("DeviceIDs is neither a list nor a map of NUMA node to list: %w", err)
	}
	var all []string
	for _, list := range perNUMA {
		all = append(all, list...)
	}
	*ids = all
	return nil
}

// ReadCheckpoint returns the devices that the kubelet's device-manager
// checkpoint at path records for the pod with the given UID, merged across its
// containers and sorted like Client.Devices. A pod with no entries gets an
// empty Devices. It is the fallback for a node without the PodResources
// socket; since the checkpoint knows pods only by UID, an empty uid is an
// error rather than an empty answer.
func ReadCheckpoint(path, uid string) (Devices, error) {
	if uid == "" {
		return nil, fmt.Errorf("read device checkpoint %s: the pod's UID is unknown, and the checkpoint knows pods only by UID", path)
	}
	b, err := safefile.Read(path, MaxCheckpointBytes)
	if err != nil {
		return nil, fmt.Errorf("read device checkpoint: %w", err)
	}
	var cp checkpointFile
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("parse device checkpoint %s: %w", path, err)
	}
	devs := Devices{}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID != uid || e.ResourceName == "" {
			continue
		}
		devs[e.ResourceName] = append(devs[e.ResourceName], e.DeviceIDs...)
	}
	devs.normalise()
	return devs, nil
}
