package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// RunDaemon runs `manifold daemon --socket socket` with any further flags,
// its output going to out, and returns once the daemon answers on the socket.
// Programs (the demo, the bench) use it; tests use StartDaemon.
func RunDaemon(manifold, socket string, out io.Writer, flags ...string) (*Daemon, error) {
	d := &Daemon{Socket: socket}
	d.cmd = exec.Command(manifold, append([]string{"daemon", "--socket", socket}, flags...)...)
	d.cmd.Stdout, d.cmd.Stderr = out, out
	// The daemon dies with whoever started it, even on a crash.
	done, err := StartTied(d.cmd, nil)
	if err != nil {
		return nil, fmt.Errorf("start manifold daemon: %w", err)
	}
	d.done = done
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			return d, nil
		}
		if d.Exited() {
			return nil, fmt.Errorf("manifold daemon exited before it listened: %v", d.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			d.kill()
			return nil, fmt.Errorf("manifold daemon: no socket at %s after 10s", socket)
		}
	}
}

// StartDaemon runs `manifold daemon` on a socket in a temp dir, with any
// further flags, and stops it when the test ends.
func StartDaemon(t testing.TB, manifold string, flags ...string) *Daemon {
	t.Helper()
	d, err := RunDaemon(manifold, filepath.Join(t.TempDir(), "run", "manifold.sock"), os.Stderr, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(t) })
	return d
}

// Kill ends the daemon with SIGKILL, as a crash or an OOM kill would.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.kill()
}

func (d *Daemon) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// Stop ends the daemon with SIGTERM and waits for it; SIGKILL after 20s.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if err := d.Terminate(); err != nil {
		t.Error(err)
	}
}

// Terminate is Stop for programs: SIGTERM, then SIGKILL after 20s, which is
// an error.
func (d *Daemon) Terminate() error {
	if d.Exited() {
		return nil
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(20 * time.Second):
		d.kill()
		return errors.New("manifold daemon did not stop within 20s of SIGTERM; killed")
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

// Pid is the daemon's process ID.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// DaemonFlags are the flags that make `manifold daemon` serve a config whose
// manifold plugin has these keys: the daemon fixes binDir, cniDir, confDir,
// kubeconfig and logFile with its own flags, and refuses a config that sets
// them otherwise (docs/security.md). Keys that are not set, or not strings,
// give no flag, so the daemon's default applies.
func DaemonFlags(plugin map[string]any) []string {
	var flags []string
	for _, k := range []struct{ key, flag string }{
		{"binDir", "--bin-dir"}, {"cniDir", "--cni-dir"}, {"confDir", "--conf-dir"},
		{"kubeconfig", "--kubeconfig"}, {"logFile", "--log-file"},
	} {
		if v, _ := plugin[k.key].(string); v != "" {
			flags = append(flags, k.flag, v)
		}
	}
	return flags
}
