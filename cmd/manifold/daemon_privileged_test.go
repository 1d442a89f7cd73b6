package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/shimproto"
)

// gateDelegate is a delegate of the gate test plugin: its ADD creates reached
// and then waits for release (at most 60s), or for its parent to die.
func gateDelegate(t *testing.T) (conf, reached, release string) {
	dir := t.TempDir()
	reached, release = filepath.Join(dir, "reached"), filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gated","type":"gate","reached":%q,"release":%q}`, reached, release), reached, release
}

// childrenNamed lists the pids of ppid's children whose command is name.
func childrenNamed(t *testing.T, ppid int, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := testenv.StatFields(string(stat))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && strings.Contains(string(stat), "("+name+")") && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
	}
}

// rawCall writes one call to the daemon's socket and returns the open
// connection, as a shim that is waiting for the answer.
func rawCall(t *testing.T, socket string, env []string, stdin []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := shimproto.WriteRequest(conn, &shimproto.Request{Env: env, Stdin: stdin}); err != nil {
		t.Fatal(err)
	}
	return conn
}

func podEnv(cmd string, pod *testenv.Pod, binDir string) []string {
	var args []string
	for _, kv := range pod.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	return []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + pod.ContainerID, "CNI_NETNS=" + pod.NetNS,
		"CNI_IFNAME=eth0", "CNI_PATH=" + binDir, "CNI_ARGS=" + strings.Join(args, ";")}
}

// TestDaemonHangUpKillsDelegate: a shim that hangs up while its ADD's delegate
// hangs (the runtime gave up, or was killed) cancels the call: the delegate
// is killed at once, not at callTimeout, the container's lock is freed, and
// the runtime's DEL that follows succeeds, well within lockTimeout.
func TestDaemonHangUpKillsDelegate(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t)
	gate, reached, _ := gateDelegate(t)
	conf := singlePlugin(t, n.manifoldConf(t, "1.0.0", map[string]any{"callTimeout": "10m", "lockTimeout": "15s"}, gate))
	pod, _ := newPod(t)

	conn := rawCall(t, d.Socket, podEnv("ADD", pod, n.rt.BinDir), conf)
	waitFile(t, reached, 30*time.Second)
	gates := childrenNamed(t, d.Pid(), "gate")
	if len(gates) != 1 {
		t.Fatalf("gate processes under the daemon: %v, want 1", gates)
	}
	conn.Close()
	waitUntil(t, 20*time.Second, "the hung delegate killed after the shim hung up", func() bool {
		return len(childrenNamed(t, d.Pid(), "gate")) == 0
	})

	del := rawCall(t, d.Socket, podEnv("DEL", pod, n.rt.BinDir), conf)
	del.SetDeadline(time.Now().Add(time.Minute))
	rep, err := shimproto.ReadReply(del)
	if err != nil {
		t.Fatalf("DEL after the hang-up: %v", err)
	}
	if rep.ExitCode != 0 {
		t.Fatalf("DEL after the hang-up: exit %d, %s", rep.ExitCode, rep.Stdout)
	}
	assertClean(t, n, "DEL after the hang-up")
}

// TestDaemonShutdownBounded: SIGTERM while a call's delegate hangs. The daemon
// waits --shutdown-timeout for it, then cancels the call (the delegate is
// killed, the shim gets the call's error) and exits; it does not wait for the
// delegate, or for the call's own callTimeout.
func TestDaemonShutdownBounded(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t, "--shutdown-timeout", "1s")
	gate, reached, _ := gateDelegate(t)
	conf := singlePlugin(t, n.manifoldConf(t, "1.0.0", map[string]any{"callTimeout": "10m"}, gate))
	pod, _ := newPod(t)

	conn := rawCall(t, d.Socket, podEnv("ADD", pod, n.rt.BinDir), conf)
	waitFile(t, reached, 30*time.Second)
	if err := syscall.Kill(d.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the daemon's exit after SIGTERM with a hung call", d.Exited)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if rep, err := shimproto.ReadReply(conn); err == nil {
		var e types.Error
		if json.Unmarshal(rep.Stdout, &e) != nil || !strings.Contains(e.Msg, "shutting down") {
			t.Errorf("the cancelled call's answer: exit %d, %s; want an error that says the daemon is shutting down", rep.ExitCode, rep.Stdout)
		}
	} else {
		t.Logf("the cancelled call got no answer (%v); the shim reports the lost connection", err)
	}
	// The daemon's children are gone with it: none was left to run on.
	if out, err := exec.Command("pgrep", "-P", strconv.Itoa(d.Pid())).Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("children of the stopped daemon still running: %s", out)
	}
}

// TestDaemonSocketMode: the socket's directory, created 0755 by whoever (a
// hostPath volume), is made 0700, and the socket is 0600.
func TestDaemonSocketMode(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "manifold.sock")
	d, err := testenv.RunDaemon(testenv.Manifold(t), socket, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(t) })
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, socket: os.ModeSocket | 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModeType | os.ModePerm); got != want {
			t.Errorf("%s: mode %s, want %s", path, got, want)
		}
	}
}

// TestDaemonRefusesNonRoot: a process of another user that reaches the socket
// (here its directory and the socket are opened up after the daemon started,
// as a careless mount or chmod would) is refused, and no call is run: the
// shim, run as nobody, gets the lost connection's code 11 and the delegate
// records no call. The same call from root is served.
func TestDaemonRefusesNonRoot(t *testing.T) {
	n := newThickNode(t, false)
	top, err := os.MkdirTemp("", "manifold-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	socket := filepath.Join(top, "run", "manifold.sock")
	d, err := testenv.RunDaemon(testenv.Manifold(t), socket, os.Stderr, n.daemonFlags()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(t) })
	for path, mode := range map[string]os.FileMode{top: 0o755, filepath.Dir(socket): 0o755, socket: 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	shim := filepath.Join(top, "manifold-shim")
	data, err := os.ReadFile(testenv.Shim(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shim, data, 0o755); err != nil {
		t.Fatal(err)
	}
	dbg := filepath.Join(t.TempDir(), "noop.json")
	if err := (&debug.Debug{ReportResult: `{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.9/24"}]}`}).WriteDebug(dbg); err != nil {
		t.Fatal(err)
	}
	noop := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"noop-net","type":"noop","debugFile":%q}`, dbg)
	conflist := n.thickConf(t, socket, noop)
	pod, _ := newPod(t)

	cmd := exec.Command(shim)
	cmd.Env = podEnv("ADD", pod, n.rt.BinDir)
	cmd.Stdin = bytes.NewReader(singlePlugin(t, conflist))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.Discard
	err = cmd.Run()
	var e types.Error
	if err == nil || json.Unmarshal(out.Bytes(), &e) != nil || e.Code != types.ErrTryAgainLater {
		t.Errorf("ADD from uid 65534: exit %v, stdout %s; want the shim's code 11 for a connection the daemon closed", err, out.Bytes())
	}
	if got, err := debug.ReadDebug(dbg); err != nil || got.Command != "" {
		t.Fatalf("the delegate after the call from uid 65534: command %q (%v); want no call run", got.Command, err)
	}

	conf := testenv.Conf(t, conflist)
	if _, err := n.rt.Add(t.Context(), conf, pod); err != nil {
		t.Fatalf("ADD from root: %v", err)
	}
	if got, err := debug.ReadDebug(dbg); err != nil || got.Command != "ADD" {
		t.Errorf("the delegate after the call from root: command %q (%v); want ADD", got.Command, err)
	}
	if err := n.rt.Del(t.Context(), conf, pod); err != nil {
		t.Fatalf("DEL from root: %v", err)
	}
}
