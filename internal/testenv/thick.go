package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FindShim returns the manifold-shim binary: $MANIFOLD_SHIM, or else a fresh
// build of ./cmd/manifold-shim placed in dir.
func FindShim(dir string) (string, error) {
	if b := os.Getenv("MANIFOLD_SHIM"); b != "" {
		return b, nil
	}
	root, err := FindRepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "manifold-shim")
	if out, err := run(root, "go", "build", "-o", bin, "./cmd/manifold-shim"); err != nil {
		return "", fmt.Errorf("build manifold-shim: %w: %s", err, out)
	}
	return bin, nil
}

// Shim returns the manifold-shim binary, built once per test if need be.
func Shim(t testing.TB) string {
	t.Helper()
	bin, err := FindShim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ThickBinDir returns a node's CNI bin dir for thick mode: every plugin and
// manifold-shim, and the manifold binary (the shim's fallback) only when
// fallback is true. Without it, a call that succeeds can only have been served
// by a daemon.
func ThickBinDir(t testing.TB, fallback bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := LinkPlugins(dir, Plugins(t)); err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{"manifold-shim": Shim(t)}
	if fallback {
		bins["manifold"] = Manifold(t)
	}
	for name, src := range bins {
		if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// SyncBuffer is a buffer that a process or a goroutine writes while the test
// reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Daemon is a running `manifold daemon`.
type Daemon struct {
	Socket string
	cmd    *exec.Cmd
	done   chan struct{}
}

// StartDaemon runs `manifold daemon` on a socket in a temp dir, with any
// further flags, waits until it answers, and stops it when the test ends.
func StartDaemon(t testing.TB, manifold string, flags ...string) *Daemon {
	t.Helper()
	d := &Daemon{Socket: filepath.Join(t.TempDir(), "run", "manifold.sock"), done: make(chan struct{})}
	d.cmd = exec.Command(manifold, append([]string{"daemon", "--socket", d.Socket}, flags...)...)
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start manifold daemon: %v", err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.Stop(t) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("manifold daemon exited before it listened: %v", d.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("manifold daemon: no socket at %s after 10s", d.Socket)
		}
	}
}

// Kill ends the daemon with SIGKILL, as a crash or an OOM kill would.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.cmd.Process.Kill()
	<-d.done
}

// Stop ends the daemon with SIGTERM and waits for it; SIGKILL after 20s.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Errorf("manifold daemon did not stop within 20s of SIGTERM")
		d.Kill(t)
	}
}

// Exited reports whether the daemon process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}
