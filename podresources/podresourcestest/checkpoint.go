package podresourcestest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// CheckpointFormat is a shape of the kubelet's device checkpoint.
type CheckpointFormat int

const (
	// CheckpointNUMA is the shape since Kubernetes 1.20: each entry's
	// DeviceIDs maps a NUMA node ("0", "1", …) to the IDs on it.
	CheckpointNUMA CheckpointFormat = iota
	// CheckpointList is the shape of Kubernetes 1.19 and older: DeviceIDs is
	// a plain list.
	CheckpointList
)

type checkpointEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     any
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []checkpointEntry
	RegisteredDevices map[string][]string
}

type checkpointFile struct {
	Data     checkpointData
	Checksum uint64
	BootID   string `json:",omitempty"`
}

// WriteCheckpoint writes the device checkpoint a kubelet would keep for pods
// to path, in the given shape, with one entry per container and resource, as
// the kubelet does. Each entry carries a real AllocResp (a marshalled
// ContainerAllocateResponse with the env var an SR-IOV device plugin sets),
// and RegisteredDevices lists every device. The checksum is a placeholder:
// readers are not expected to verify it. The file is replaced atomically.
func WriteCheckpoint(tb testing.TB, path string, format CheckpointFormat, pods ...Pod) {
	tb.Helper()
	cp := checkpointFile{
		Data:     checkpointData{RegisteredDevices: map[string][]string{}},
		Checksum: 2707281465,
	}
	if format == CheckpointNUMA {
		cp.BootID = "9f3a6c1e-4b0d-4e57-a0c2-7d8e5f1b2a39"
	}
	for _, p := range pods {
		for _, c := range p.Containers {
			byResource := map[string][]Device{}
			var order []string
			for _, d := range c.Devices {
				if byResource[d.Resource] == nil {
					order = append(order, d.Resource)
				}
				byResource[d.Resource] = append(byResource[d.Resource], d)
				cp.Data.RegisteredDevices[d.Resource] = append(cp.Data.RegisteredDevices[d.Resource], d.ID)
			}
			for _, res := range order {
				devs := byResource[res]
				cp.Data.PodDeviceEntries = append(cp.Data.PodDeviceEntries, checkpointEntry{
					PodUID:        p.UID,
					ContainerName: c.Name,
					ResourceName:  res,
					DeviceIDs:     checkpointIDs(format, devs),
					AllocResp:     allocResp(tb, res, devs),
				})
			}
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		tb.Fatalf("write checkpoint: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatalf("write checkpoint: %v", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatalf("write checkpoint: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatalf("write checkpoint: %v", err)
	}
}

func checkpointIDs(format CheckpointFormat, devs []Device) any {
	if format == CheckpointList {
		ids := make([]string, 0, len(devs))
		for _, d := range devs {
			ids = append(ids, d.ID)
		}
		return ids
	}
	perNUMA := map[string][]string{}
	for _, n := range numaNodes(devs) {
		perNUMA[strconv.FormatInt(n, 10)] = []string{}
	}
	for _, d := range devs {
		k := strconv.FormatInt(d.NUMA, 10)
		perNUMA[k] = append(perNUMA[k], d.ID)
	}
	return perNUMA
}

// allocResp is what an SR-IOV device plugin answers Allocate with: the
// devices' IDs in an env var named after the resource.
func allocResp(tb testing.TB, resource string, devs []Device) []byte {
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		ids = append(ids, d.ID)
	}
	env := "PCIDEVICE_" + strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(strings.ToUpper(resource))
	b, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{env: strings.Join(ids, ",")}})
	if err != nil {
		tb.Fatalf("write checkpoint: marshal AllocResp: %v", err)
	}
	return b
}
