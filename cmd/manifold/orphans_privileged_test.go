package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// No process outlives its call (docs/reliability.md). Each test runs a
// delegate whose ADD hangs after starting a child of its own, as a plugin
// that runs iptables waiting on the xtables lock, ends the call the way a
// node does, and checks which of the two is left.

// hung is the hanging delegate of one test: a script in the node's bin dir
// whose ADD starts `sleep 600` in the background, writes "<its pid> <the
// child's pid>" to a file of the pod's, and waits; its other verbs succeed.
type hung struct {
	dir string
}

func newHung(t *testing.T, n *node) *hung {
	t.Helper()
	h := &hung{dir: t.TempDir()}
	script := fmt.Sprintf(`#!/bin/sh
case "$CNI_COMMAND" in
ADD) sleep 600 &
     echo "$$ $!" > %[1]s/$CNI_CONTAINERID.tmp
     mv %[1]s/$CNI_CONTAINERID.tmp %[1]s/$CNI_CONTAINERID
     wait ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}' ;;
esac
`, h.dir)
	if err := os.WriteFile(filepath.Join(n.rt.BinDir, "hangadd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever a failing test leaves is killed; only processes that are
	// still the hanging plugin or its sleep, so a pid reused meanwhile is
	// left alone.
	t.Cleanup(func() {
		entries, _ := os.ReadDir(h.dir)
		for _, e := range entries {
			for _, pid := range h.read(e.Name()) {
				if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmd, []byte("hangadd")) || bytes.Contains(cmd, []byte("sleep\x00600")) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	return h
}

const hungConf = `{"cniVersion":"1.0.0","name":"hung","type":"hangadd"}`

func (h *hung) read(containerID string) []int {
	b, err := os.ReadFile(filepath.Join(h.dir, containerID))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// wait returns the delegate's and its child's pids once the ADD hangs.
func (h *hung) wait(t *testing.T, pod *testenv.Pod) (delegate, child int) {
	t.Helper()
	var pids []int
	waitUntil(t, time.Minute, "the hanging delegate's ADD", func() bool {
		pids = h.read(pod.ContainerID)
		return len(pids) == 2
	})
	return pids[0], pids[1]
}

// alive reports whether pid runs; a zombie has let go of everything it held.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := testenv.StatFields(string(stat))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// gone waits until none of pids runs. The kernel's SIGKILL ends a process
// at once; the bound covers a loaded machine's scheduling only.
func gone(t *testing.T, what string, pids ...int) {
	t.Helper()
	var left []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = left[:0]
		for _, p := range pids {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes %v of %v still running after 30s", what, left, pids)
		}
	}
}

// notRunning checks, at once, that none of pids runs: for a call that has
// returned, which waits for its delegate's group.
func notRunning(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, p := range pids {
		if alive(p) {
			t.Errorf("%s: process %d still running", what, p)
		}
	}
}

// startBinary starts a CNI binary of the node's bin dir (manifold, or
// manifold-shim) for one call, as a runtime does.
func startBinary(t *testing.T, n *node, bin, cmd string, conf []byte, pod *testenv.Pod) *exec.Cmd {
	t.Helper()
	c := exec.Command(filepath.Join(n.rt.BinDir, bin))
	c.Env = append(os.Environ(), podEnv(cmd, pod, n.rt.BinDir)...)
	c.Stdin = bytes.NewReader(conf)
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return c
}

// hungConfs is a bridge default network and the hanging delegate as net1.
func (n *node) hungConfs(extra map[string]any, thick bool) func(t *testing.T) []byte {
	return func(t *testing.T) []byte {
		conf := n.manifoldConf(t, "1.1.0", extra, n.bridgeConf("1.0.0", "10.241.9.0/24"), hungConf)
		if thick {
			conf = bytes.Replace(conf, []byte(`"type":"manifold"`), []byte(`"type":"manifold-shim"`), 1)
		}
		return singlePlugin(t, conf)
	}
}

// delClean runs the runtime's DEL of each pod and checks that nothing is left.
func delClean(t *testing.T, n *node, conf []byte, what string, pods ...*testenv.Pod) {
	t.Helper()
	for _, pod := range pods {
		if err := n.rt.Del(context.Background(), testenv.Conf(t, wrapList(t, conf)), pod); err != nil {
			t.Errorf("DEL after %s: %v", what, err)
		}
	}
	assertClean(t, n, "DEL after "+what)
}

// wrapList is a single plugin's config as a conflist again, for testenv's runtime.
func wrapList(t *testing.T, conf []byte) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(conf, &p); err != nil {
		t.Fatal(err)
	}
	l := map[string]any{"cniVersion": p["cniVersion"], "name": p["name"], "plugins": []any{p}}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOrphansThinRuntimeKill: the runtime SIGKILLs manifold at its own
// timeout (containerd kills only the process it started). The delegate gets
// SIGKILL from the kernel; its own child, which no process of manifold is
// left to kill, runs on until the runtime's DEL of the container, which
// kills it from the note of the delegate's process group
// (docs/reliability.md). Before, the delegate ran on for good, and then
// the child did.
func TestOrphansThinRuntimeKill(t *testing.T) {
	n := newNode(t)
	h := newHung(t, n)
	conf := n.hungConfs(nil, false)(t)
	pod, _ := newPod(t)
	m := startBinary(t, n, "manifold", "ADD", conf, pod)
	delegate, child := h.wait(t, pod)
	m.Process.Kill()
	m.Wait()
	gone(t, "the delegate of a SIGKILLed manifold", delegate)
	if !alive(child) {
		t.Fatalf("the delegate's child %d died with it: the test shows nothing", child)
	}
	delClean(t, n, conf, "the runtime killed manifold", pod)
	notRunning(t, "after the runtime's DEL of the container whose ADD was killed", child)
}

// TestOrphansThinCallTimeout: the call's callTimeout kills the delegate's
// whole group, and ADD returns only once it is gone.
func TestOrphansThinCallTimeout(t *testing.T) {
	n := newNode(t)
	h := newHung(t, n)
	conf := n.hungConfs(map[string]any{"callTimeout": "3s"}, false)(t)
	pod, _ := newPod(t)
	_, err := n.rt.Add(context.Background(), testenv.Conf(t, wrapList(t, conf)), pod)
	wantCode(t, err, types.ErrTryAgainLater, "callTimeout 3s")
	delegate, child := h.wait(t, pod)
	notRunning(t, "when ADD returned at callTimeout", delegate, child)
	delClean(t, n, conf, "callTimeout", pod)
}

func wantCode(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != code || !strings.Contains(te.Msg, msg) {
		t.Fatalf("error %v, want code %d saying %q", err, code, msg)
	}
}

// TestOrphansThickCallerGaveUp: the shim's caller gives up (the runtime
// SIGKILLs the shim at its timeout) while the call has a 5 s callTimeout.
// The daemon cancels the call: the delegate's group is killed.
func TestOrphansThickCallerGaveUp(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t)
	h := newHung(t, n)
	conf := n.hungConfs(map[string]any{"daemonSocket": d.Socket, "callTimeout": "5s"}, true)(t)
	pod, _ := newPod(t)
	shim := startBinary(t, n, "manifold-shim", "ADD", conf, pod)
	delegate, child := h.wait(t, pod)
	shim.Process.Kill()
	shim.Wait()
	gone(t, "the hung delegate and its child after the shim's caller gave up", delegate, child)
	delClean(t, n, conf, "the shim's caller gave up", pod)
}

// TestOrphansThickCallTimeout: the shim waits; the daemon ends the call at
// its callTimeout with the delegate's group gone, and answers code 11.
func TestOrphansThickCallTimeout(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t)
	h := newHung(t, n)
	conf := n.hungConfs(map[string]any{"daemonSocket": d.Socket, "callTimeout": "3s"}, true)(t)
	pod, _ := newPod(t)
	_, err := n.rt.Add(context.Background(), testenv.Conf(t, wrapList(t, conf)), pod)
	wantCode(t, err, types.ErrTryAgainLater, "callTimeout 3s")
	delegate, child := h.wait(t, pod)
	notRunning(t, "when the daemon answered at callTimeout", delegate, child)
	delClean(t, n, conf, "callTimeout", pod)
}

// TestOrphansThickShutdown: SIGTERM (a rolling update) while calls hang. At
// --shutdown-timeout the daemon cancels them, kills their delegates' groups,
// and exits with none left. Before, each delegate's child ran on.
func TestOrphansThickShutdown(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t, "--shutdown-timeout", "1s")
	h := newHung(t, n)
	conf := n.hungConfs(map[string]any{"daemonSocket": d.Socket, "callTimeout": "10m"}, true)(t)
	pods, pids := hangPods(t, n, h, d.Socket, conf, 3)
	if err := syscall.Kill(d.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the daemon's exit after SIGTERM", d.Exited)
	notRunning(t, "when the daemon had exited", pids...)
	d2 := n.startDaemon(t)
	conf = bytes.Replace(conf, []byte(d.Socket), []byte(d2.Socket), 1)
	delClean(t, n, conf, "the daemon's shutdown", pods...)
}

// TestOrphansThickDaemonKilled: the daemon is SIGKILLed (the OOM killer)
// while calls hang, under load: several calls at once, and threads of the
// daemon ending meanwhile. Every delegate gets SIGKILL from the kernel. Their
// children have no process of manifold left to act until the pods' DEL,
// served by the daemon started again, or by the binary while the daemon is
// away (the shim falls back), kills them (docs/reliability.md).
func TestOrphansThickDaemonKilled(t *testing.T) {
	n := newThickNode(t, true)
	d := n.startDaemon(t)
	h := newHung(t, n)
	conf := n.hungConfs(map[string]any{"daemonSocket": d.Socket, "callTimeout": "10m"}, true)(t)
	pods, pids := hangPods(t, n, h, d.Socket, conf, 6)
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the daemon's exit after SIGKILL", d.Exited)
	for i := 0; i < len(pids); i += 2 {
		gone(t, "the delegate of a SIGKILLed daemon", pids[i])
	}
	var children []int
	for i := 1; i < len(pids); i += 2 {
		if alive(pids[i]) {
			children = append(children, pids[i])
		}
	}
	if len(children) == 0 {
		t.Fatal("every delegate's child died with it: the test shows nothing")
	}
	// Half the pods are deleted while the daemon is away: the shim falls
	// back to the binary. The rest by the daemon started again.
	for _, pod := range pods[:len(pods)/2] {
		if err := n.rt.Del(context.Background(), testenv.Conf(t, wrapList(t, conf)), pod); err != nil {
			t.Errorf("DEL while the daemon is away: %v", err)
		}
	}
	d2 := n.startDaemon(t)
	conf = bytes.Replace(conf, []byte(d.Socket), []byte(d2.Socket), 1)
	delClean(t, n, conf, "the daemon was killed", pods[len(pods)/2:]...)
	notRunning(t, "after the pods' DEL", children...)
}

// hangPods starts k ADDs through the daemon's socket, as k shims, and
// returns once every one hangs, with the pids: delegate, child, delegate, …
func hangPods(t *testing.T, n *node, h *hung, socket string, conf []byte, k int) ([]*testenv.Pod, []int) {
	t.Helper()
	var pods []*testenv.Pod
	for range k {
		pod, _ := newPod(t)
		pods = append(pods, pod)
	}
	// Each returns once its request is written: the calls run at once.
	for _, pod := range pods {
		rawCall(t, socket, podEnv("ADD", pod, n.rt.BinDir), conf)
	}
	var pids []int
	for _, pod := range pods {
		a, b := h.wait(t, pod)
		pids = append(pids, a, b)
	}
	return pods, pids
}
