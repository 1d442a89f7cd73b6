package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// newThickNode is newNode for thick mode, with testenv.ThickBinDir's bin dir:
// with fallback false there is no manifold binary in it, so a call that
// succeeds can only have been served by the daemon.
func newThickNode(t *testing.T, fallback bool) *node {
	testenv.RequirePrivileged(t)
	n := &node{rt: testenv.NewRuntime(t, testenv.ThickBinDir(t, fallback)), cniDir: t.TempDir(), leaseDir: t.TempDir(), bridge: testenv.UniqueName("mfbr")}
	t.Cleanup(func() { testenv.DeleteLink(n.bridge) })
	return n
}

// daemonFlags are the daemon's node paths that match manifoldConf's: the
// daemon refuses a config whose binDir, cniDir or confDir differ from them.
func (n *node) daemonFlags() []string {
	return []string{"--bin-dir", n.rt.BinDir, "--cni-dir", n.cniDir, "--conf-dir", filepath.Join(n.cniDir, "net.d")}
}

// startDaemon starts a daemon that serves n's configs, with further flags.
func (n *node) startDaemon(t *testing.T, flags ...string) *testenv.Daemon {
	t.Helper()
	return testenv.StartDaemon(t, testenv.Manifold(t), append(n.daemonFlags(), flags...)...)
}

// thickConf is manifoldConf with manifold-shim as the type and the daemon's socket.
func (n *node) thickConf(t *testing.T, socket string, delegates ...string) []byte {
	t.Helper()
	return bytes.Replace(n.manifoldConf(t, "1.1.0", map[string]any{"daemonSocket": socket}, delegates...),
		[]byte(`"type":"manifold"`), []byte(`"type":"manifold-shim"`), 1)
}

// threeDelegates is the bridge, macvlan and ptp set of TestThreeDelegatesAddDel.
func (n *node) threeDelegates(t *testing.T, subnet string) []string {
	parent := testenv.VethParent(t)
	return []string{
		n.bridgeConf("1.0.0", "10."+subnet+".1.0/24"),
		n.macvlanConf("0.4.0", parent, "10."+subnet+".2.0/24"),
		ptpConf("0.3.1", "10."+subnet+".3.7/24"),
	}
}

// assertAttached checks the pod's three interfaces and the node's leases.
func assertAttached(t *testing.T, n *node, netns ns.NetNS, subnet string) {
	t.Helper()
	links := podLinks(t, netns)
	want := map[string]string{"eth0": "10." + subnet + ".1.", "net1": "10." + subnet + ".2.", "net2": "10." + subnet + ".3.7/24"}
	if len(links) != len(want) {
		t.Errorf("pod links = %v, want exactly %v", links, want)
	}
	for name, prefix := range want {
		if addrs := links[name]; len(addrs) != 1 || !strings.HasPrefix(addrs[0], prefix) {
			t.Errorf("%s addresses = %v, want one starting %s", name, addrs, prefix)
		}
	}
	if got := leases(t, n.leaseDir); len(got) != 2 {
		t.Errorf("host-local leases = %v, want 2", got)
	}
}

// TestThickAddDel: ADD, CHECK and DEL of a pod with three real delegates, served
// by the daemon (the bin dir has no manifold binary to fall back to); also with
// --host-root, here the machine's own /, so that the whole flow runs through
// the chrooted exec (TestExecChroot shows that the chroot applies).
func TestThickAddDel(t *testing.T) {
	for _, flags := range [][]string{nil, {"--host-root", "/"}} {
		t.Run(strings.Join(append([]string{"daemon"}, flags...), " "), func(t *testing.T) { thickAddDel(t, flags) })
	}
}

func thickAddDel(t *testing.T, flags []string) {
	n := newThickNode(t, false)
	d := n.startDaemon(t, flags...)
	ctx := context.Background()
	conf := testenv.Conf(t, n.thickConf(t, d.Socket, n.threeDelegates(t, "202")...))
	pod, netns := newPod(t)

	res, err := n.rt.Add(ctx, conf, pod)
	if err != nil {
		t.Fatalf("ADD through the daemon: %v", err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version() != "1.1.0" || len(cur.IPs) != 1 || !strings.HasPrefix(cur.IPs[0].Address.String(), "10.202.1.") {
		t.Errorf("result = version %s, IPs %v; want 1.1.0 and one address in 10.202.1.0/24", res.Version(), cur.IPs)
	}
	assertAttached(t, n, netns, "202")
	if err := n.rt.Check(ctx, conf, pod); err != nil {
		t.Errorf("CHECK through the daemon: %v", err)
	}
	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Fatalf("DEL through the daemon: %v", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v, want none", got)
	}
	assertClean(t, n, "DEL through the daemon")
}

// TestThickFallback: with no daemon (no socket file, or the file of a daemon
// that was killed), the shim runs the manifold binary, and ADD and DEL work.
func TestThickFallback(t *testing.T) {
	for _, state := range []string{"no socket", "stale socket"} {
		t.Run(state, func(t *testing.T) {
			n := newThickNode(t, true)
			socket := filepath.Join(t.TempDir(), "manifold.sock")
			if state == "stale socket" {
				d := n.startDaemon(t)
				d.Kill(t)
				if _, err := os.Stat(d.Socket); err != nil {
					t.Fatalf("a killed daemon should leave its socket file: %v", err)
				}
				socket = d.Socket
			}
			ctx := context.Background()
			conf := testenv.Conf(t, n.thickConf(t, socket, n.threeDelegates(t, "203")...))
			pod, netns := newPod(t)
			if _, err := n.rt.Add(ctx, conf, pod); err != nil {
				t.Fatalf("ADD with the daemon down: %v", err)
			}
			t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
			assertAttached(t, n, netns, "203")
			if err := n.rt.Del(ctx, conf, pod); err != nil {
				t.Fatalf("DEL with the daemon down: %v", err)
			}
			assertClean(t, n, "DEL with the daemon down")
		})
	}
}

// TestThickNoFallbackBinary: with the daemon down and no manifold binary next
// to the shim, ADD fails with "try again later" and names the socket.
func TestThickNoFallbackBinary(t *testing.T) {
	n := newThickNode(t, false)
	socket := filepath.Join(t.TempDir(), "manifold.sock")
	conf := testenv.Conf(t, n.thickConf(t, socket, n.threeDelegates(t, "204")...))
	pod, netns := newPod(t)
	_, err := n.rt.Add(context.Background(), conf, pod)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, socket) {
		t.Fatalf("ADD = %v, want code 11 naming %s", err, socket)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after a refused ADD = %v", got)
	}
}

// TestThickDaemonKilledMidAdd kills the daemon while the second delegate is half
// done. The shim answers "try again later"; the runtime's DEL then runs the
// binary (the daemon is gone) and removes all of it.
func TestThickDaemonKilledMidAdd(t *testing.T) {
	n := newThickNode(t, true)
	d := n.startDaemon(t)
	dir := t.TempDir()
	reached, release := filepath.Join(dir, "reached"), filepath.Join(dir, "release")
	delegates := n.threeDelegates(t, "205")
	delegates[1] = gated(delegates[1], reached, release)
	conflist := n.thickConf(t, d.Socket, delegates...)
	pod, netns := newPod(t)

	shim := exec.Command(filepath.Join(n.rt.BinDir, "manifold-shim"))
	var args []string
	for _, kv := range pod.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	shim.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+pod.ContainerID, "CNI_NETNS="+pod.NetNS,
		"CNI_IFNAME=eth0", "CNI_PATH="+n.rt.BinDir, "CNI_ARGS="+strings.Join(args, ";"))
	shim.Stdin = bytes.NewReader(singlePlugin(t, conflist))
	var out bytes.Buffer
	shim.Stdout, shim.Stderr = &out, os.Stderr
	if err := shim.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, reached, 30*time.Second)
	d.Kill(t)
	err := shim.Wait()
	var te types.Error
	if err == nil || json.Unmarshal(out.Bytes(), &te) != nil || te.Code != types.ErrTryAgainLater {
		t.Fatalf("shim after the daemon died: exit %v, stdout %s; want code 11", err, out.Bytes())
	}
	if !strings.Contains(te.Msg, "connection lost") {
		t.Errorf("message %q should say the connection was lost", te.Msg)
	}
	if got := len(podLinks(t, netns)); got != 2 {
		t.Fatalf("links in the pod at the crash = %d, want 2", got)
	}
	if err := n.rt.Del(context.Background(), testenv.Conf(t, conflist), pod); err != nil {
		t.Fatalf("DEL after the daemon died: %v", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v", got)
	}
	assertClean(t, n, "DEL after the daemon died")
}

// TestThickConcurrentPods: 20 pods attach and detach at once through one daemon.
func TestThickConcurrentPods(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t)
	parent := testenv.VethParent(t)
	conf := testenv.Conf(t, n.thickConf(t, d.Socket,
		n.bridgeConf("1.0.0", "10.206.0.0/16"),
		n.macvlanConf("1.0.0", parent, "10.207.0.0/16")))
	concurrentPods(t, n, conf, 20, 2)
	assertClean(t, n, "concurrent pods through the daemon")
	if d.Exited() {
		t.Error("the daemon exited during the test")
	}
}

// TestDaemonHandOver is a rolling update that starts the new daemon before the
// old one stops: the new one waits for the socket, and once the old one has
// stopped on SIGTERM, it serves the calls (the bin dir has no manifold binary,
// so only a daemon can serve them).
func TestDaemonHandOver(t *testing.T) {
	n := newThickNode(t, false)
	old := n.startDaemon(t)
	next := exec.Command(testenv.Manifold(t), append([]string{"daemon", "--socket", old.Socket}, n.daemonFlags()...)...)
	nextLog := &testenv.SyncBuffer{}
	next.Stderr = nextLog
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	nextDone := make(chan error, 1)
	go func() { nextDone <- next.Wait() }()
	t.Cleanup(func() {
		next.Process.Signal(syscall.SIGTERM)
		select {
		case <-nextDone:
		case <-time.After(20 * time.Second):
			next.Process.Kill()
		}
	})
	waitLog := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(nextLog.String(), want); time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-nextDone:
				t.Fatalf("the new daemon exited (%v) before %q:\n%s", err, want, nextLog.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the new daemon did not log %q within 20s:\n%s", want, nextLog.String())
			}
		}
	}
	waitLog("waiting for it to stop")

	ctx := context.Background()
	conf := testenv.Conf(t, n.thickConf(t, old.Socket, n.bridgeConf("1.0.0", "10.208.0.0/24")))
	for i, stopOld := range []bool{false, true} {
		if stopOld {
			old.Stop(t)
			waitLog("daemon listening")
		}
		pod, netns := newPod(t)
		if _, err := n.rt.Add(ctx, conf, pod); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if got := countLinks(netns); got != 1 {
			t.Errorf("ADD %d: %d links in the pod, want 1", i, got)
		}
		if err := n.rt.Del(ctx, conf, pod); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	assertClean(t, n, "hand-over")
}

// TestDaemonSurvivesBadFrames: garbage, a frame cut short, a frame that claims
// 2 GiB of stdin and a connection left silent do not stop the daemon; a real
// call served afterwards works. A 512 KiB config, far larger than a pipe buffer,
// also goes through the daemon, and through the shim's fallback (stdin in a
// memfd).
func TestDaemonSurvivesBadFrames(t *testing.T) {
	n := newThickNode(t, true)
	d := n.startDaemon(t)
	for _, frame := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		[]byte("MFQ1\x00\x00\x00\x01\x00\x00"),
		[]byte("MFQ1\x00\x00\x00\x00\x7f\xff\xff\xff"),
		nil,
	} {
		c, err := net.Dial("unix", d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(frame)
		if frame == nil {
			// Silent: the daemon's read deadline ends it; leave it open.
			t.Cleanup(func() { c.Close() })
			continue
		}
		c.Close()
	}
	big := map[string]any{"padding": strings.Repeat("x", 512<<10)}
	for _, socket := range []string{d.Socket, filepath.Join(t.TempDir(), "none.sock")} {
		conf := n.thickConf(t, socket, n.bridgeConf("1.0.0", "10.209.0.0/24"))
		conf = bytes.Replace(conf, []byte(`"type":"manifold-shim"`), []byte(`"type":"manifold-shim","padding":`+strconvQuote(big["padding"].(string))), 1)
		list := testenv.Conf(t, conf)
		pod, netns := newPod(t)
		if _, err := n.rt.Add(context.Background(), list, pod); err != nil {
			t.Fatalf("ADD with a 512 KiB config via %s: %v", socket, err)
		}
		if got := countLinks(netns); got != 1 {
			t.Errorf("via %s: %d links in the pod, want 1", socket, got)
		}
		if err := n.rt.Del(context.Background(), list, pod); err != nil {
			t.Fatalf("DEL via %s: %v", socket, err)
		}
	}
	if d.Exited() {
		t.Fatal("the daemon exited")
	}
	assertClean(t, n, "after bad frames")
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestDaemonProbe: `manifold daemon --probe` passes against a live daemon and
// fails against a killed one (its socket file left behind) and a stopped one.
func TestDaemonProbe(t *testing.T) {
	testenv.RequirePrivileged(t)
	bin := testenv.Manifold(t)
	probe := func(socket string) error {
		out, err := exec.Command(bin, "daemon", "--probe", "--socket", socket).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	killed := testenv.StartDaemon(t, bin)
	stopped := testenv.StartDaemon(t, bin)
	if err := probe(killed.Socket); err != nil {
		t.Fatalf("probe of a live daemon: %v", err)
	}
	killed.Kill(t)
	stopped.Stop(t)
	for name, socket := range map[string]string{"killed": killed.Socket, "stopped": stopped.Socket} {
		if err := probe(socket); err == nil {
			t.Errorf("probe of a %s daemon passed", name)
		}
	}
}
