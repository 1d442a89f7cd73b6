package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/shimproto"
)

// servedDaemon is a daemon served in the test process on a socket in a temp
// dir, with the real plugins as its --bin-dir.
type servedDaemon struct {
	*daemon
	socket, cniDir string
}

// serveTestDaemon starts one; configure may change it before it serves. It is
// stopped, and its calls cancelled, when the test ends.
func serveTestDaemon(t *testing.T, configure func(*daemon)) *servedDaemon {
	t.Helper()
	cniDir := t.TempDir()
	d := newDaemon(slog.New(slog.NewTextHandler(os.Stderr, nil)), "", &netconf.NodePaths{BinDir: testenv.Plugins(t), CNIDir: cniDir, ConfDir: filepath.Join(cniDir, "net.d")})
	d.peerUID = uint32(os.Getuid())
	s := &servedDaemon{daemon: d, socket: filepath.Join(t.TempDir(), "run", "manifold.sock"), cniDir: cniDir}
	d.shutdownTimeout, d.killWait = 0, 10*time.Second
	if configure != nil {
		configure(d)
	}
	ln, err := listenSocket(s.socket, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the daemon did not stop within 30s")
		}
		d.plugin.DrainWithin(time.Minute)
	})
	return s
}

// gateConf is a config whose one delegate is the gate test plugin: its ADD
// creates reached, then waits for release (at most 60s) or its death.
func gateConf(t *testing.T, extra map[string]any) (conf []byte, reached, release string) {
	t.Helper()
	dir := t.TempDir()
	reached, release = filepath.Join(dir, "reached"), filepath.Join(dir, "release")
	m := map[string]any{"cniVersion": "1.0.0", "name": "manifold", "type": "manifold",
		"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "gated", "type": "gate", "reached": reached, "release": release}}}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b, reached, release
}

func addEnv(containerID string) []string {
	return []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + containerID, "CNI_NETNS=/nonexistent/netns", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"}
}

// send makes one call on the socket, as the shim does, and waits at most
// wait for the answer.
func send(socket string, env []string, stdin []byte, wait time.Duration) (*shimproto.Reply, error) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	if err := shimproto.WriteRequest(conn, &shimproto.Request{Env: env, Stdin: stdin}); err != nil {
		return nil, err
	}
	return shimproto.ReadReply(conn)
}

// cniError decodes the CNI error of a failed reply.
func cniError(t *testing.T, rep *shimproto.Reply) *types.Error {
	t.Helper()
	var e types.Error
	if rep.ExitCode == 0 || json.Unmarshal(rep.Stdout, &e) != nil {
		t.Fatalf("reply: exit %d, stdout %s; want a CNI error", rep.ExitCode, rep.Stdout)
	}
	return &e
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestProbeReportsStuckCalls: the liveness probe fails while a call has run
// past twice its callTimeout and the slack (here the daemon's clock is moved
// on, so that the delegate need not really outlive its kill), naming the
// call; before and after, it passes.
func TestProbeReportsStuckCalls(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := serveTestDaemon(t, func(d *daemon) { d.now = clock })
	conf, reached, release := gateConf(t, map[string]any{"callTimeout": "1m"})
	answered := make(chan error, 1)
	go func() {
		rep, err := send(s.socket, addEnv("stuck1"), conf, time.Minute)
		if err == nil && rep.ExitCode != 0 {
			err = errors.New(string(rep.Stdout))
		}
		answered <- err
	}()
	waitFor(t, "the gate's ADD", func() bool { return exists(reached) })
	if err := probeDaemon(s.socket, probeTimeout); err != nil {
		t.Fatalf("probe while the call is young: %v", err)
	}
	mu.Lock()
	now = now.Add(2*time.Minute + stuckSlack - time.Second)
	mu.Unlock()
	if err := probeDaemon(s.socket, probeTimeout); err != nil {
		t.Fatalf("probe while the call is within its bound: %v", err)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	err := probeDaemon(s.socket, probeTimeout)
	if err == nil || !strings.Contains(err.Error(), `ADD of container \"stuck1\"`) || !strings.Contains(err.Error(), "callTimeout 1m0s") {
		t.Fatalf("probe while the call is stuck = %v; want a failure naming the ADD of stuck1 and its callTimeout", err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the released ADD: %v", err)
	}
	if err := probeDaemon(s.socket, probeTimeout); err != nil {
		t.Fatalf("probe after the call ended: %v", err)
	}
}

// TestDaemonBusy: with --max-calls 1 and that call held by its delegate, the
// next call waits its bounded time for a slot and is answered "daemon busy"
// (code 11); a connection beyond the connections held (twice --max-calls) is
// closed; VERSION, which needs no slot, is still answered.
func TestDaemonBusy(t *testing.T) {
	s := serveTestDaemon(t, func(d *daemon) {
		d.setMaxCalls(1)
		d.busyWait = 2 * time.Second
	})
	conf, reached, release := gateConf(t, nil)
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	first := make(chan error, 1)
	go func() {
		_, err := send(s.socket, addEnv("busy1"), conf, time.Minute)
		first <- err
	}()
	waitFor(t, "the first call's delegate", func() bool { return exists(reached) })
	if err := probeDaemon(s.socket, probeTimeout); err != nil {
		t.Errorf("probe with every slot taken: %v", err)
	}
	// The daemon lets go of a connection just after its answer.
	heldOne := func() bool { return len(s.conns) == 1 }
	waitFor(t, "the probe's connection to be let go", heldOne)

	rep, err := send(s.socket, addEnv("busy2"), conf, 20*time.Second)
	if err != nil {
		t.Fatalf("second call: %v; want an answer within the busy wait", err)
	}
	if e := cniError(t, rep); e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "busy") || !strings.Contains(e.Msg, "--max-calls") {
		t.Errorf("second call: %+v, want code 11 saying the daemon is busy", e)
	}
	waitFor(t, "the second call's connection to be let go", heldOne)

	// Hold the second of the two connections in its wait for a slot; a
	// third is closed at once, without an answer.
	waiting, err := net.Dial("unix", s.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	if err := shimproto.WriteRequest(waiting, &shimproto.Request{Env: addEnv("busy3"), Stdin: conf}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiting connection to be accepted", func() bool { return len(s.conns) == 2 })
	if _, err := send(s.socket, addEnv("busy4"), conf, 20*time.Second); err == nil {
		t.Error("a connection beyond twice --max-calls was served")
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first call: %v", err)
	}
}
