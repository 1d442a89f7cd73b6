package devinfo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	resource = "intel.com/sriov_netdevice"
	deviceID = "0000:af:06.0"
)

var att = Attachment{Network: "ns1/sriov-a", ContainerID: "c0ffee42", IfName: "net1"}

// A device plugin's file as sriov-network-device-plugin writes one, pretty
// printed so that the copy's bytes can be told from a re-encoding.
const dpDoc = `{
  "type": "pci",
  "version": "1.1.0",
  "pci": {"pci-address": "0000:af:06.0", "pf-pci-address": "0000:af:00.0", "rdma-device": ""}
}
`

func writeDP(t *testing.T, d Dir, content string) string {
	t.Helper()
	path, err := d.DevicePluginPath(resource, deviceID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPaths(t *testing.T) {
	d := Dir{Base: "/b"}
	dp, err := d.DevicePluginPath(resource, "vdpa/0000:af:06.0")
	if want := "/b/dp/intel.com-sriov_netdevice-vdpa-0000:af:06.0-device.json"; err != nil || dp != want {
		t.Errorf("DevicePluginPath = %q, %v; want %q", dp, err, want)
	}
	cni, err := d.AttachmentPath(att)
	if want := "/b/cni/ns1-sriov-a-c0ffee42_net1"; err != nil || cni != want {
		t.Errorf("AttachmentPath = %q, %v; want %q", cni, err, want)
	}
	if p, _ := (Dir{}).AttachmentPath(att); !strings.HasPrefix(p, DefaultBaseDir+"/cni/") {
		t.Errorf("zero Dir gives %q, want a path under %s", p, DefaultBaseDir)
	}
}

func TestPathsRefuseBadParts(t *testing.T) {
	d := Dir{Base: "/b"}
	for _, bad := range []string{"", "..", "a/../b", "../x", "x..", "a\x00b", "a\nb", "\xff", strings.Repeat("r", maxPartLen+1)} {
		if _, err := d.DevicePluginPath(bad, deviceID); !errors.Is(err, ErrBadName) {
			t.Errorf("resource %q: error %v, want ErrBadName", bad, err)
		}
		if _, err := d.DevicePluginPath(resource, bad); !errors.Is(err, ErrBadName) {
			t.Errorf("device ID %q: error %v, want ErrBadName", bad, err)
		}
		if _, err := d.AttachmentPath(Attachment{Network: bad, ContainerID: "c", IfName: "net1"}); !errors.Is(err, ErrBadName) {
			t.Errorf("network %q: error %v, want ErrBadName", bad, err)
		}
	}
	for _, a := range []Attachment{
		{Network: "n", ContainerID: "../c", IfName: "net1"},
		{Network: "n", ContainerID: "a/b", IfName: "net1"},
		{Network: "n", ContainerID: "", IfName: "net1"},
		{Network: "n", ContainerID: "c", IfName: "a/b"},
		{Network: "n", ContainerID: "c", IfName: ".."},
		{Network: "n", ContainerID: "c", IfName: "sixteen-chars-xx"},
		// Each part is within bounds, the file name is not.
		{Network: strings.Repeat("n", maxPartLen), ContainerID: "c", IfName: "net1"},
	} {
		if _, err := d.AttachmentPath(a); !errors.Is(err, ErrBadName) {
			t.Errorf("%+v: error %v, want ErrBadName", a, err)
		}
	}
}

func TestCopy(t *testing.T) {
	// The file must be 0444 whatever the umask.
	defer syscall.Umask(syscall.Umask(0o077))
	d := Dir{Base: filepath.Join(t.TempDir(), "devinfo")}
	writeDP(t, d, dpDoc)
	out, err := d.Copy(resource, deviceID, att)
	if err != nil || out != Copied {
		t.Fatalf("Copy = %v, %v; want copied", out, err)
	}
	dst, _ := d.AttachmentPath(att)
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != dpDoc {
		t.Errorf("copy holds %q, %v; want the device plugin's bytes", b, err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("copy's mode %v, %v; want 0444", st.Mode(), err)
	}
	assertOnlyFile(t, filepath.Dir(dst), filepath.Base(dst))

	info, err := d.Read(att)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:06.0","pf-pci-address":"0000:af:00.0","rdma-device":""}}`
	if info.Type != TypePCI || info.Version != "1.1.0" || string(info.Raw) != want {
		t.Errorf("Read = %+v (raw %s)", info, info.Raw)
	}

	// A retried ADD finds its own copy: left as is, and fine.
	if out, err := d.Copy(resource, deviceID, att); err != nil || out != AlreadyThere {
		t.Errorf("second Copy = %v, %v; want already there", out, err)
	}
}

func TestCopyNeverOverwrites(t *testing.T) {
	d := Dir{Base: t.TempDir()}
	writeDP(t, d, dpDoc)
	dst, _ := d.AttachmentPath(att)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	other := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:06.7"}}`
	if err := os.WriteFile(dst, []byte(other), 0o444); err != nil {
		t.Fatal(err)
	}
	out, err := d.Copy(resource, deviceID, att)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), dst) {
		t.Fatalf("Copy = %v, %v; want ErrConflict naming %s", out, err, dst)
	}
	if b, _ := os.ReadFile(dst); string(b) != other {
		t.Errorf("existing file changed to %q", b)
	}
	assertOnlyFile(t, filepath.Dir(dst), filepath.Base(dst))
}

func TestCopyWithoutDevicePluginFile(t *testing.T) {
	d := Dir{Base: t.TempDir()}
	out, err := d.Copy(resource, deviceID, att)
	if err != nil || out != NoDevicePluginFile {
		t.Fatalf("Copy = %v, %v; want no device-plugin file", out, err)
	}
	dst, _ := d.AttachmentPath(att)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it absent", dst, err)
	}
}

func TestCopyRefusesBadDevicePluginFiles(t *testing.T) {
	t.Run("invalid", func(t *testing.T) {
		d := Dir{Base: t.TempDir()}
		src := writeDP(t, d, `{"type":"pci"}`)
		if _, err := d.Copy(resource, deviceID, att); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), src) {
			t.Errorf("error %v, want ErrInvalid naming %s", err, src)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		d := Dir{Base: t.TempDir()}
		src := writeDP(t, d, "")
		elsewhere := filepath.Join(t.TempDir(), "doc.json")
		if err := os.WriteFile(elsewhere, []byte(dpDoc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(src); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, src); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Copy(resource, deviceID, att); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("error %v, want one about the symlink", err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		d := Dir{Base: t.TempDir()}
		src := writeDP(t, d, "")
		if err := os.Remove(src); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(src, 0o644); err != nil {
			t.Fatal(err)
		}
		// With no writer, a blocking open would hang here.
		if _, err := d.Copy(resource, deviceID, att); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("error %v, want one about the FIFO", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		d := Dir{Base: t.TempDir()}
		writeDP(t, d, `{"type":"pci","version":"1.1.0","x":"`+strings.Repeat("a", MaxFileBytes)+`"}`)
		if _, err := d.Copy(resource, deviceID, att); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("error %v, want one about the size", err)
		}
	})
}

// The delegate may write the attachment's file itself; Read returns what is
// there.
func TestReadWhatTheDelegateWrote(t *testing.T) {
	d := Dir{Base: t.TempDir()}
	if info, err := d.Read(att); info != nil || err != nil {
		t.Errorf("Read with no file = %v, %v; want nil, nil", info, err)
	}
	dst, _ := d.AttachmentPath(att)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := `{"type": "vhost-user", "version": "1.0.0", "vhost-user": {"mode": "server", "path": "/var/run/vhu.sock"}}`
	if err := os.WriteFile(dst, []byte(doc), 0o444); err != nil {
		t.Fatal(err)
	}
	info, err := d.Read(att)
	if err != nil || info.Type != TypeVhostUser || info.Version != "1.0.0" {
		t.Fatalf("Read = %+v, %v", info, err)
	}
	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte(`{"type":"usb","version":"1.0.0"}`), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read(att); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), dst) {
		t.Errorf("Read of a bad file: %v, want ErrInvalid naming %s", err, dst)
	}
}

func TestRemove(t *testing.T) {
	d := Dir{Base: t.TempDir()}
	writeDP(t, d, dpDoc)
	if _, err := d.Copy(resource, deviceID, att); err != nil {
		t.Fatal(err)
	}
	dst, _ := d.AttachmentPath(att)
	for i := range 2 {
		if err := d.Remove(att); err != nil {
			t.Fatalf("Remove %d: %v", i, err)
		}
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want it gone", dst, err)
	}
	// The device plugin's file is the device plugin's.
	if src, _ := d.DevicePluginPath(resource, deviceID); !exists(src) {
		t.Errorf("Remove took the device plugin's file %s", src)
	}
	if err := d.Remove(Attachment{Network: "..", ContainerID: "c", IfName: "net1"}); !errors.Is(err, ErrBadName) {
		t.Errorf("Remove with a bad name: %v", err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// assertOnlyFile checks that no temp file was left beside the copy.
func assertOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != name {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want only %s", dir, names, name)
	}
}

// TestWritePCIDocument: a DRA device's document, made from its PCI address,
// is written by Copy's rules: valid, 0444, never over another document, and
// a retried ADD finds its own.
func TestWritePCIDocument(t *testing.T) {
	d := Dir{Base: t.TempDir()}
	doc, err := PCIDocument("0000:03:00.1")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := d.Write(doc, att); err != nil || out != Written {
		t.Fatalf("Write = %v, %v; want written", out, err)
	}
	info, err := d.Read(att)
	if err != nil || info.Type != TypePCI || string(info.Raw) != `{"pci":{"pci-address":"0000:03:00.1"},"type":"pci","version":"1.1.0"}` {
		t.Fatalf("Read = %+v, %v", info, err)
	}
	dst, _ := d.AttachmentPath(att)
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("mode %v, %v; want 0444", st.Mode(), err)
	}
	if out, err := d.Write(doc, att); err != nil || out != AlreadyThere {
		t.Errorf("second Write = %v, %v; want already there", out, err)
	}
	other, _ := PCIDocument("0000:03:00.7")
	if _, err := d.Write(other, att); !errors.Is(err, ErrConflict) {
		t.Errorf("Write over another document: %v, want ErrConflict", err)
	}
	if _, err := d.Write([]byte(`{"type":"gpu"}`), Attachment{Network: "n", ContainerID: "c2", IfName: "net1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write of an invalid document: %v, want ErrInvalid", err)
	}
}
