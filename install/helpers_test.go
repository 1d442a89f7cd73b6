package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// helperEnv makes the test binary act as the "old binary" that
// TestCopyFileAtomicWhileExecuting runs in a loop.
const helperEnv = "MANIFOLD_INSTALL_TEST_HELPER"

// markerB ends the second version of the helper binary. ELF loaders ignore
// trailing bytes, so both versions run the same code.
const markerB = "\n#manifold-test-version-B\n"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "version":
		os.Exit(runHelper())
	case "loop":
		os.Exit(loopHelper(os.Args[1]))
	}
	os.Exit(m.Run())
}

// loopHelper plays the container runtime: it executes path over and over
// until its stdin closes, and prints one line per exec: the version that ran,
// or FAIL and why. It is a process of its own because a Go process that both
// writes a binary and forks sees spurious "text file busy" from its own
// children (https://github.com/golang/go/issues/22315); the installer and the
// runtime are separate processes too.
func loopHelper(path string) int {
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	for {
		select {
		case <-stop:
			return 0
		default:
		}
		cmd := exec.Command(path)
		cmd.Env = append(os.Environ(), helperEnv+"=version")
		out, err := cmd.Output()
		if err != nil || (string(out) != "A" && string(out) != "B") {
			fmt.Printf("FAIL output %q, error %v\n", out, err)
			continue
		}
		fmt.Printf("%s\n", out)
	}
}

// runHelper prints which version of the binary is running, judged by the
// file the kernel is executing (which a rename over the path does not change).
func runHelper() int {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	tail := make([]byte, len(markerB))
	if _, err := f.ReadAt(tail, st.Size()-int64(len(tail))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if string(tail) == markerB {
		fmt.Print("B")
	} else {
		fmt.Print("A")
	}
	return 0
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error after a generous bound (the machine may be busy).
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after 30s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takeOverTwice runs the installer twice on a node that holds Multus's
// config named multusFile (a restart), each time until Multus's config is
// moved aside and manifold's written, and fails if the second run writes
// other bytes than the first. afterFirst runs between the two. It returns
// what the first run wrote.
func (n *testNode) takeOverTwice(t *testing.T, multusFile string, afterFirst func()) []byte {
	t.Helper()
	var first []byte
	for run := 1; run <= 2; run++ {
		cancel, done := n.start(t)
		eventually(t, "Multus's config is moved", func() error {
			if _, err := os.Stat(filepath.Join(n.o.CNIConfDir, multusFile)); !os.IsNotExist(err) {
				return fmt.Errorf("%s is still there (%v)", multusFile, err)
			}
			_, err := os.Stat(filepath.Join(n.o.CNIConfDir, multusFile+MultusDisabledSuffix))
			return err
		})
		eventually(t, "manifold's config is written", func() error { _, _, err := n.plugin(); return err })
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		data, err := os.ReadFile(n.confOut)
		if err != nil {
			t.Fatal(err)
		}
		if run == 1 {
			first = data
			afterFirst()
		} else if string(data) != string(first) {
			t.Errorf("the second run wrote\n%s\nthe first\n%s", data, first)
		}
	}
	return first
}

// testNode is a temp dir standing in for a node: the host's CNI dirs as the
// installer's pod mounts them, and the pod's projected token volume.
type testNode struct {
	o       *Options
	root    string
	saDir   string
	saGen   int
	logs    *testenv.SyncBuffer
	confOut string // path of our config in the conf dir
	// env is the installer's environment (POD_NAME, POD_NAMESPACE).
	env map[string]string
}

// newTestNode sets up the dirs. notify chooses between fsnotify (with a poll
// interval too long to matter) and the poll fallback alone.
func newTestNode(t *testing.T, notify bool) *testNode {
	t.Helper()
	root := t.TempDir()
	n := &testNode{root: root, saDir: filepath.Join(root, "sa"), logs: &testenv.SyncBuffer{}}
	o := DefaultOptions()
	o.CNIBinDir = filepath.Join(root, "host/opt/cni/bin")
	o.CNIConfDir = filepath.Join(root, "host/etc/cni/net.d")
	o.Binary = ""
	o.TokenFile = filepath.Join(n.saDir, "token")
	o.CAFile = filepath.Join(n.saDir, "ca.crt")
	o.APIServer = "https://10.96.0.1:443"
	// No API server here: a test of Multus's daemon config sets it again.
	o.MultusDaemonConfig = ""
	o.PrimaryWaitTimeout = time.Minute
	if notify {
		o.PollInterval = time.Hour
	} else {
		o.noNotify = true
		o.PollInterval = 50 * time.Millisecond
	}
	for _, d := range []string{o.CNIBinDir, o.CNIConfDir, n.saDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.o = o
	n.confOut = filepath.Join(o.CNIConfDir, DefaultConfigName)
	n.project(t, "token-1", "ca-1")
	return n
}

// project updates the token volume the way the kubelet's atomic writer does:
// a new timestamped dir, the ..data symlink swapped to it by rename, and the
// visible names being symlinks through ..data.
func (n *testNode) project(t *testing.T, token, ca string) {
	t.Helper()
	n.saGen++
	gen := fmt.Sprintf("..gen_%d", n.saGen)
	if err := os.Mkdir(filepath.Join(n.saDir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"token": token, "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(n.saDir, gen, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(n.saDir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(n.saDir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.saDir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// writeConf writes a file into the conf dir (atomically, as a well-behaved
// CNI installer does, so the test is about our reaction, not torn reads).
func (n *testNode) writeConf(t *testing.T, name, data string) {
	t.Helper()
	if err := WriteFileAtomic(filepath.Join(n.o.CNIConfDir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs the installer until the test ends; the returned channel yields
// Run's result.
func (n *testNode) start(t *testing.T) (cancel func(), done <-chan error) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	stopped := make(chan struct{})
	log := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() {
		defer close(stopped)
		ch <- run(ctx, n.o, log, func(k string) string { return n.env[k] })
	}()
	t.Cleanup(func() {
		cancelCtx()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("installer did not stop within 30s of cancel")
		}
		if t.Failed() {
			t.Logf("installer logs:\n%s", n.logs.String())
		}
	})
	return cancelCtx, ch
}

// plugin reads our config and returns its single plugin, failing the check
// (not the test) while it is missing or has another shape.
func (n *testNode) plugin() (version string, plugin map[string]any, err error) {
	data, err := os.ReadFile(n.confOut)
	if err != nil {
		return "", nil, err
	}
	return decodeConflist(data)
}

func decodeConflist(data []byte) (string, map[string]any, error) {
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return "", nil, fmt.Errorf("decode %q: %w", data, err)
	}
	if list.Name != DefaultNetworkName || len(list.Plugins) != 1 {
		return "", nil, fmt.Errorf("want one plugin in a conflist named %q, got %s", DefaultNetworkName, data)
	}
	return list.CNIVersion, list.Plugins[0], nil
}

// wantClusterNetwork waits until our config wraps the named primary with the
// given cniVersion.
func (n *testNode) wantClusterNetwork(t *testing.T, primary, version string) {
	t.Helper()
	want := filepath.Join(n.o.HostCNIConfDir, primary)
	eventually(t, "config wraps "+primary+" at "+version, func() error {
		v, p, err := n.plugin()
		if err != nil {
			return err
		}
		if p["clusterNetwork"] != want || v != version {
			return fmt.Errorf("clusterNetwork %v, cniVersion %s", p["clusterNetwork"], v)
		}
		return nil
	})
}

func fileIs(path, want string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(got) != want {
		return fmt.Errorf("%s holds %q, want %q", path, got, want)
	}
	return nil
}

func logHas(logs *testenv.SyncBuffer, s string) error {
	if !strings.Contains(logs.String(), s) {
		return fmt.Errorf("no log line with %q", s)
	}
	return nil
}
