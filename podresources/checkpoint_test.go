package podresources_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/podresources"
	prt "github.com/manifold-cni/manifold/podresources/podresourcestest"
)

func TestNoSocketReadsCheckpoint(t *testing.T) {
	for name, format := range map[string]prt.CheckpointFormat{"numa": prt.CheckpointNUMA, "list": prt.CheckpointList} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, filepath.Join(t.TempDir(), "no-such.sock"))
			prt.WriteCheckpoint(t, c.Checkpoint, format, append(others, podA)...)
			devs, src, err := c.Devices(context.Background(), pod(podA))
			if err != nil {
				t.Fatal(err)
			}
			if src != podresources.SourceCheckpoint {
				t.Errorf("source %q, want %q", src, podresources.SourceCheckpoint)
			}
			if !reflect.DeepEqual(devs, wantA) {
				t.Errorf("devices\n got %v\nwant %v", devs, wantA)
			}
		})
	}
}

func TestCheckpointPodWithoutEntries(t *testing.T) {
	c := newClient(t, filepath.Join(t.TempDir(), "no-such.sock"))
	prt.WriteCheckpoint(t, c.Checkpoint, prt.CheckpointNUMA, others...)
	devs, src, err := c.Devices(context.Background(), pod(podA))
	if err != nil {
		t.Fatal(err)
	}
	if src != podresources.SourceCheckpoint || devs == nil || len(devs) != 0 {
		t.Errorf("got %#v from %q, want empty from checkpoint", devs, src)
	}
}

func TestNoSocketNoCheckpoint(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-such.sock")
	c := newClient(t, sock)
	_, src, err := c.Devices(context.Background(), pod(podA))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{sock, c.Checkpoint, "ns1/a", "uid-a"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if src != podresources.SourceCheckpoint {
		t.Errorf("source %q", src)
	}
}

func TestCheckpointNeedsUID(t *testing.T) {
	c := newClient(t, filepath.Join(t.TempDir(), "no-such.sock"))
	prt.WriteCheckpoint(t, c.Checkpoint, prt.CheckpointNUMA, podA)
	p := pod(podA)
	p.UID = ""
	if _, _, err := c.Devices(context.Background(), p); err == nil || !strings.Contains(err.Error(), "UID") {
		t.Errorf("error %v, want one about the missing UID", err)
	}
}

func TestReadCheckpointRejectsDamage(t *testing.T) {
	for name, content := range map[string]string{
		"torn":       `{"Data":{"PodDeviceEntries":[{"PodUID":"uid-a",`,
		"bad ids":    `{"Data":{"PodDeviceEntries":[{"PodUID":"uid-a","ResourceName":"r","DeviceIDs":"0000:af:06.0"}]}}`,
		"bad numa":   `{"Data":{"PodDeviceEntries":[{"PodUID":"uid-a","ResourceName":"r","DeviceIDs":{"0":"x"}}]}}`,
		"not object": `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := podresources.ReadCheckpoint(path, "uid-a"); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want one naming %s", err, path)
			}
		})
	}
}

func TestReadCheckpointBoundsSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: no disk is used for the size.
	if err := f.Truncate(podresources.MaxCheckpointBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := podresources.ReadCheckpoint(path, "uid-a"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("error %v, want one about the size", err)
	}
}

// Entries with a null DeviceIDs (no devices) are accepted, and empty IDs are
// dropped.
func TestReadCheckpointOddEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	content := `{"Data":{"PodDeviceEntries":[
		{"PodUID":"uid-a","ContainerName":"c","ResourceName":"r1","DeviceIDs":null},
		{"PodUID":"uid-a","ContainerName":"c","ResourceName":"r2","DeviceIDs":{"-1":["b",""],"0":["a"]}},
		{"PodUID":"uid-a","ContainerName":"c","ResourceName":"","DeviceIDs":["z"]}
	],"RegisteredDevices":{"r2":["a","b"]}},"Checksum":1}`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	devs, err := podresources.ReadCheckpoint(path, "uid-a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (podresources.Devices{"r2": {"a", "b"}}); !reflect.DeepEqual(devs, want) {
		t.Errorf("devices %v, want %v", devs, want)
	}
}
