package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCopyFileAtomicWhileExecuting replaces a binary again and again while
// another goroutine executes it in a loop, as a container runtime does with
// the CNI plugin during an upgrade. Every exec must succeed and run a whole
// version: writing in place would fail with "text file busy" or run a torn file.
func TestCopyFileAtomicWhileExecuting(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := filepath.Join(dir, "src-a")
	b := filepath.Join(dir, "src-b")
	if err := CopyFileAtomic(self, a, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, append(data, markerB...), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(binDir, "manifold")
	if err := CopyFileAtomic(a, dst, 0o755); err != nil {
		t.Fatal(err)
	}

	// The "runtime" is another process that runs dst in a loop.
	loop := exec.Command(self, dst)
	loop.Env = append(os.Environ(), helperEnv+"=loop")
	stdin, err := loop.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := loop.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		execs    atomic.Int64
		mu       sync.Mutex
		failures []string
		read     = make(chan struct{})
	)
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); line != "A" && line != "B" {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("exec %d: %s", execs.Load(), line))
				mu.Unlock()
			}
			execs.Add(1)
		}
	}()
	stopLoop := func() {
		stdin.Close()
		<-read
		loop.Wait()
	}
	t.Cleanup(func() {
		if loop.ProcessState == nil {
			loop.Process.Kill()
			stopLoop()
		}
	})

	// Copy until the loop has run plenty of times across the swaps, within a
	// generous bound for a busy machine.
	copies := 0
	deadline := time.Now().Add(60 * time.Second)
	for (copies < 6 || execs.Load() < 30) && time.Now().Before(deadline) {
		src := a
		if copies%2 == 0 {
			src = b
		}
		if err := CopyFileAtomic(src, dst, 0o755); err != nil {
			t.Errorf("copy %d: %v", copies, err)
		}
		copies++
	}
	stopLoop()
	t.Logf("%d execs across %d copies", execs.Load(), copies)
	if n := execs.Load(); n < 30 || copies < 6 {
		t.Fatalf("only %d execs across %d copies within 60s; the test proved nothing", n, copies)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, f := range failures {
		if i == 10 {
			t.Errorf("… and %d more failed execs", len(failures)-i)
			break
		}
		t.Error(f)
	}

	// The last copy is the one that runs now.
	if err := CopyFileAtomic(b, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(dst)
	cmd.Env = append(os.Environ(), helperEnv+"=version")
	if out, err := cmd.Output(); err != nil || string(out) != "B" {
		t.Fatalf("after the last copy: output %q, error %v; want B", out, err)
	}
	assertNoTempFiles(t, binDir)
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "00-x.conflist")
	for i, content := range []string{"first", "second, longer than the first", "3"} {
		if err := WriteFileAtomic(path, []byte(content), 0o640); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if err := fileIs(path, content); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode().Perm())
	}
	assertNoTempFiles(t, dir)

	// A failed write leaves neither a temp file nor the target.
	missing := filepath.Join(dir, "no-such-dir", "f")
	if err := WriteFileAtomic(missing, []byte("x"), 0o644); err == nil {
		t.Fatal("write into a missing dir succeeded")
	}
	if err := CopyFileAtomic(filepath.Join(dir, "no-such-src"), filepath.Join(dir, "dst"), 0o644); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("copy of a missing source: %v, want not-exist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dst")); !os.IsNotExist(err) {
		t.Fatalf("failed copy left dst behind: %v", err)
	}
	assertNoTempFiles(t, dir)
}

func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // several read buffers
	changed := bytes.Clone(big)
	changed[len(changed)-1] = 'X'
	a := write("a", big)
	for _, tc := range []struct {
		name string
		b    string
		want bool
	}{
		{"identical", write("same", big), true},
		{"same size, last byte differs", write("changed", changed), false},
		{"shorter", write("short", big[:100]), false},
		{"missing", filepath.Join(dir, "missing"), false},
	} {
		got, err := sameFile(a, tc.b)
		if err != nil || got != tc.want {
			t.Errorf("%s: sameFile = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	tmps, err := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tmps) > 0 {
		t.Errorf("temp files left behind: %v", tmps)
	}
}
