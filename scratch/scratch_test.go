package scratch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/netconf"
)

func sampleRecord(id string) *Record {
	return &Record{
		ContainerID: id,
		NetNS:       "/var/run/netns/x",
		Pod:         netconf.PodRef{Namespace: "default", Name: "p", UID: "u"},
		RuntimeArgs: [][2]string{{"K8S_POD_NAME", "p"}},
		Attachments: []netconf.Attachment{
			{Network: "br", IfName: "eth0", IsDefault: true, Config: json.RawMessage(`{"cniVersion":"1.0.0","name":"br","plugins":[{"type":"bridge"}]}`)},
			{Network: "mv", NAD: "default/mv", IfName: "net1", Config: json.RawMessage(`{"cniVersion":"1.0.0","name":"mv","plugins":[{"type":"macvlan"}]}`),
				CNIArgs: [][2]string{{"IP", "10.0.0.1/24"}}, RuntimeConfig: map[string]any{"mac": "aa:bb:cc:dd:ee:ff"}},
		},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := sampleRecord("abc123")
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Encode(got)
	if string(again) != string(b) {
		t.Errorf("round trip changed the record:\n%s\n%s", b, again)
	}
	if got.Attachments[1].NAD != "default/mv" || got.Attachments[1].CNIArgs[0][1] != "10.0.0.1/24" {
		t.Errorf("decoded attachment = %+v", got.Attachments[1])
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	good, err := Encode(sampleRecord("abc123"))
	if err != nil {
		t.Fatal(err)
	}
	// The payload's "eth0" (the summary, ahead of it, names it too).
	i := strings.LastIndex(string(good), `"eth0"`)
	flipped := []byte(string(good[:i]) + `"eth9"` + string(good[i+len(`"eth0"`):]))
	var env map[string]any
	_ = json.Unmarshal(good, &env)
	delete(env, "version")
	noVersion, _ := json.Marshal(env)
	cases := map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)/2],
		"garbage":        []byte("\x00\x01garbage"),
		"edited payload": flipped,
		"no version":     noVersion,
		"string version": []byte(`{"version":"1"}`),
		"not an object":  []byte(`[1,2,3]`),
		"too large":      append(good, make([]byte, MaxRecordBytes)...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(b)
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownVersion) {
				t.Errorf("Decode = %v, want ErrCorrupt only", err)
			}
		})
	}
}

// TestDecodeUnknownVersion: a record of a version this manifold has no reader
// for (a newer manifold's, after a rollback) is refused as that, not as corrupt,
// and the error names the version.
func TestDecodeUnknownVersion(t *testing.T) {
	good, err := Encode(sampleRecord("abc123"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{0, 2, 99, -1} {
		var env map[string]any
		_ = json.Unmarshal(good, &env)
		env["version"] = v
		b, _ := json.Marshal(env)
		_, err := Decode(b)
		if !errors.Is(err, ErrUnknownVersion) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version "+strconv.Itoa(v)) {
			t.Errorf("Decode of version %d = %v, want ErrUnknownVersion naming the version", v, err)
		}
	}
	// A future format need not look like this one at all.
	other := []byte(`{"version":2,"records":{"whatever":[1,2]},"crc":7}`)
	if _, err := Decode(other); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("Decode of a version 2 record of another shape = %v, want ErrUnknownVersion", err)
	}
}

// TestWrittenRecordsReadBack: Encode refuses whatever Decode would refuse (size,
// container ID, attachments), with an error that says why; what it writes is
// read back.
func TestWrittenRecordsReadBack(t *testing.T) {
	// A record whose encoding is just under the limit, and one just over.
	base, _ := Encode(sampleRecord("abc123"))
	for _, tc := range []struct {
		pad    int
		wantOK bool
	}{{MaxRecordBytes - len(base) - 64, true}, {MaxRecordBytes, false}} {
		r := sampleRecord("abc123")
		r.NetNS = strings.Repeat("n", tc.pad)
		b, err := Encode(r)
		if !tc.wantOK {
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "abc123") || !strings.Contains(err.Error(), strconv.Itoa(MaxRecordBytes)) {
				t.Errorf("Encode of an oversized record = %v, want ErrTooLarge naming the container and the limit", err)
			}
			s := &Store{Dir: t.TempDir()}
			if err := s.Save(r); !errors.Is(err, ErrTooLarge) {
				t.Errorf("Save of an oversized record = %v, want ErrTooLarge", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Encode of a %d-byte record: %v", len(base)+tc.pad, err)
		}
		if _, err := Decode(b); err != nil {
			t.Errorf("Decode of a %d-byte record that Encode wrote: %v", len(b), err)
		}
	}
	for name, damage := range map[string]func(*Record){
		"bad ifname":     func(r *Record) { r.Attachments[1].IfName = "a/b" },
		"no config":      func(r *Record) { r.Attachments[0].Config = nil },
		"no network":     func(r *Record) { r.Attachments[0].Network = "" },
		"bad containers": func(r *Record) { r.ContainerID = "../x" },
	} {
		r := sampleRecord("abc123")
		damage(r)
		if _, err := Encode(r); err == nil {
			t.Errorf("Encode with %s = nil, want an error (Decode would refuse it)", name)
		}
	}
}

// TestLoadNamesFile: the errors of Load name the record's file, so a warning
// about it tells the admin what to look at.
func TestLoadNamesFile(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	if err := os.WriteFile(s.Path("c1"), []byte(`{"version":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.Load("c1")
	if !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), s.Path("c1")) {
		t.Errorf("Load of a version 2 record = %v, want ErrUnknownVersion naming %s", err, s.Path("c1"))
	}
}

func TestValidateContainerID(t *testing.T) {
	good := []string{"abc", "0123456789abcdef", "a_b.c-d", strings.Repeat("a", MaxContainerIDLen)}
	bad := []string{"", "../etc", "a/b", ".hidden", "a..b", "results", "locks", "a b", strings.Repeat("a", MaxContainerIDLen+1), "a\x00b"}
	for _, id := range good {
		if err := ValidateContainerID(id); err != nil {
			t.Errorf("ValidateContainerID(%q) = %v, want ok", id, err)
		}
	}
	for _, id := range bad {
		if err := ValidateContainerID(id); err == nil {
			t.Errorf("ValidateContainerID(%q) = nil, want an error", id)
		}
	}
}

func TestStoreSaveLoadRemoveList(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	if r, err := s.Load("nothing"); r != nil || err != nil {
		t.Fatalf("Load of a missing record = %v, %v; want nil, nil", r, err)
	}
	for _, id := range []string{"c1", "c2"} {
		if err := s.Save(sampleRecord(id)); err != nil {
			t.Fatal(err)
		}
	}
	// A temp file that a manifold before .new-<containerID> left is swept by List.
	if err := os.WriteFile(filepath.Join(s.Dir, ".tmp-c3-123"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := s.List()
	if err != nil || strings.Join(ids, ",") != "c1,c2" {
		t.Fatalf("List = %v, %v; want c1,c2", ids, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, ".tmp-c3-123")); !os.IsNotExist(err) {
		t.Errorf("temp file survived List: %v", err)
	}
	r, err := s.Load("c1")
	if err != nil || r.ContainerID != "c1" || len(r.Attachments) != 2 {
		t.Fatalf("Load = %+v, %v", r, err)
	}
	// A record copied under another container's name is refused.
	b, _ := os.ReadFile(s.Path("c1"))
	if err := os.WriteFile(s.Path("c9"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load("c9"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of a misplaced record = %v, want ErrCorrupt", err)
	}
	if err := s.Remove("c1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("c1"); err != nil {
		t.Errorf("second Remove = %v, want nil", err)
	}
	if r, _ := s.Load("c1"); r != nil {
		t.Errorf("record survived Remove")
	}
	if err := s.Save(sampleRecord("../evil")); err == nil {
		t.Errorf("Save accepted a path-traversal container ID")
	}
}

func TestLockSerialisesAndTimesOut(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	l, err := s.Lock(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Lock(ctx, "c1"); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("second Lock = %v, want ErrLockTimeout", err)
	}
	// Another container is independent.
	l2, err := s.Lock(context.Background(), "c2")
	if err != nil {
		t.Fatal(err)
	}
	l2.Unlock(true)

	got := make(chan *Lock)
	go func() {
		l3, err := s.Lock(context.Background(), "c1")
		if err != nil {
			t.Error(err)
		}
		got <- l3
	}()
	select {
	case <-got:
		t.Fatal("a waiter took the lock while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	// Unlock with remove: the waiter must notice the file it waited on is gone
	// and lock the new one.
	l.Unlock(true)
	l3 := <-got
	if l3 == nil {
		t.Fatal("waiter got no lock")
	}
	l3.Unlock(true)
	if entries, _ := os.ReadDir(filepath.Join(s.Dir, lockDirName)); len(entries) != 0 {
		t.Errorf("lock files left: %v", entries)
	}
}

// SweepLocks removes exactly the lock files of containers with no record
// whose lock no call holds: among many pods' lock files, each kept by a
// record, a held lock of a container whose record is not written yet is
// kept, and only the file a killed call left is removed.
func TestSweepLocks(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	ctx := context.Background()
	take := func(id string) *Lock {
		l, err := s.Lock(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for i := range 50 {
		id := "pod" + strconv.Itoa(i)
		take(id).Unlock(false) // a running pod's lock file stays after ADD
		if err := s.Save(sampleRecord(id)); err != nil {
			t.Fatal(err)
		}
	}
	take("killed").Unlock(false) // its process died; the runtime forgot it
	busy := take("busy")         // an ADD before its record is written
	defer busy.Unlock(true)
	if n := s.SweepLocks(); n != 1 {
		t.Errorf("SweepLocks removed %d lock files, want 1", n)
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir, lockDirName))
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, e := range entries {
		left[e.Name()] = true
	}
	if left["killed"] || !left["busy"] || !left["pod0"] || !left["pod49"] || len(left) != 51 {
		t.Errorf("lock files after the sweep: %v; want every pod's and busy's, not killed's", left)
	}
	// A second sweep finds nothing more to remove.
	if n := s.SweepLocks(); n != 0 {
		t.Errorf("second SweepLocks removed %d", n)
	}
}

// Whatever else sits in the lock directory is neither followed nor opened:
// Lock refuses a symlink or a FIFO at a container's lock path, and creates
// nothing where a symlink points; the sweep leaves both alone. Before, Lock
// created the symlink's target and locked it, and the sweep opened the
// target for writing and removed the symlink.
func TestLocksOpenOnlyRegularFiles(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	dir := filepath.Join(s.Dir, lockDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"link", "fifo"} {
		if l, err := s.Lock(context.Background(), id); err == nil || !strings.Contains(err.Error(), id) {
			if l != nil {
				l.Unlock(false)
			}
			t.Errorf("Lock(%s) = %v, want an error naming it", id, err)
		}
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink's target exists after Lock: %v", err)
	}
	if n := s.SweepLocks(); n != 0 {
		t.Errorf("SweepLocks removed %d entries that are not lock files", n)
	}
	for _, id := range []string{"link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dir, id)); err != nil {
			t.Errorf("%s after the sweep: %v", id, err)
		}
	}
}

// A FIFO left at a record's path reads as a damaged record; it does not
// block the open until someone writes it (with os.Open, Load and LoadSummary
// waited for a writer that never came).
func TestRecordPathFIFODoesNotBlock(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	if err := syscall.Mkfifo(s.Path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Load("fifo"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of a FIFO = %v, %v; want ErrCorrupt", r, err)
	}
	if sum, err := s.LoadSummary("fifo"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("LoadSummary of a FIFO = %v, %v; want ErrCorrupt", sum, err)
	}
}

// BenchmarkSweepLocks is a sweep on a node with 100 pods: 100 records and
// their lock files, nothing to remove (go test ./scratch -bench SweepLocks).
func BenchmarkSweepLocks(b *testing.B) {
	s := &Store{Dir: b.TempDir()}
	for i := range 100 {
		id := strconv.Itoa(i)
		l, err := s.Lock(context.Background(), id)
		if err != nil {
			b.Fatal(err)
		}
		l.Unlock(false)
		if err := s.Save(sampleRecord(id)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		s.SweepLocks()
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sampleRecord("abc123"))
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add([]byte(`{"version":1,"sha256":"00","record":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The summary's reader sees the same bytes first, and must not
		// panic on any of them.
		readSummary(bytes.NewReader(b))
		r, err := Decode(b)
		if err != nil {
			if errors.Is(err, ErrCorrupt) == errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("Decode error %v wraps neither or both of ErrCorrupt and ErrUnknownVersion", err)
			}
			return
		}
		// Whatever decodes must be safe to act on.
		if ValidateContainerID(r.ContainerID) != nil {
			t.Fatalf("decoded an invalid container ID %q", r.ContainerID)
		}
		for _, a := range r.Attachments {
			if netconf.ValidateIfName(a.IfName) != nil || a.Network == "" || len(a.Config) == 0 {
				t.Fatalf("decoded an unusable attachment %+v", a)
			}
		}
	})
}
