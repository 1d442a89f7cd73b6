package e2e

// The runtime tier: containerd 2.x and CRI-O 1.35, both with runc, call
// manifold as they do on a node, and the tests drive them over the CRI, in
// thin mode and again in daemon mode. See runtime_env_test.go for the node
// and runtime_crio_test.go for what only CRI-O does.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

func TestRuntimeThin(t *testing.T)   { runtimeKinds(t, false) }
func TestRuntimeDaemon(t *testing.T) { runtimeKinds(t, true) }

// runtimeKinds runs every case on containerd, then on CRI-O.
func runtimeKinds(t *testing.T, daemon bool) {
	for _, kind := range []string{containerdKind, crioKind} {
		t.Run(kind, func(t *testing.T) { runtimeCases(t, kind, daemon) })
	}
}

type runtimeCase struct {
	name string
	run  func(*criEnv)
}

func runtimeCases(t *testing.T, kind string, daemon bool) {
	e := newCRIEnv(t, kind, daemon, controlPlane(t))
	cases := []runtimeCase{
		{"static delegates", runtimeStatic},
		{"NADs", runtimeNADs},
		{"STATUS", runtimeStatus},
		{"failures", runtimeFailures},
		{"load", runtimeLoad},
		{"traffic", runtimeTraffic},
		{"runtime crash", runtimeCrash},
	}
	if daemon {
		cases = append(cases, runtimeCase{"daemon crash", runtimeDaemonCrash})
	}
	if kind == crioKind {
		cases = append(cases, crioCases...)
	}
	for _, c := range cases {
		if !t.Run(c.name, func(t *testing.T) { c.run(e.sub(t)) }) {
			// A case that fails may leave sandboxes that make the next
			// ones' checks meaningless; the cleanup removes them.
			return
		}
	}
}

// Static delegates: RunPodSandbox gives eth0 (the default network) and net1
// (defaultNetworks) in the sandbox's netns; the sandbox IP the runtime
// reports is eth0's. CRI-O CHECKs once within RunPodSandbox (ocicni reads
// the result it reports through a CHECK), containerd never. Stop and remove
// each DEL on containerd, the stop alone on CRI-O (its remove skips a
// stopped network); every DEL succeeds and nothing is left.
func runtimeStatic(e *criEnv) {
	t := e.t
	p := e.pod(e.ns, nil)
	sb := e.mustRun(p, true)
	if got := sorted(e.netnsLinks(sb)); !slices.Equal(got, []string{"eth0", "lo", "net1"}) {
		t.Errorf("links in the sandbox = %v, want eth0, lo, net1", got)
	}
	ips := e.waitStatus(p, 2)
	ip, err := e.node.SandboxIP(e.ctx(), sb.id)
	if err != nil {
		t.Fatal(err)
	}
	if ip == "" || ip != ips["eth0"] {
		t.Errorf("sandbox IP = %q, want eth0's %q (network-status %v)", ip, ips["eth0"], ips)
	}
	if !e.cluster.Contains(net.ParseIP(ip)) || !e.net1.Contains(net.ParseIP(ips["net1"])) {
		t.Errorf("addresses %v: want eth0 in %s and net1 in %s", ips, e.cluster, e.net1)
	}
	checks := 0
	if e.kind == crioKind {
		checks = 1
	}
	if n := e.logLines("CHECK done", sb.id); n != checks {
		t.Errorf("manifold logged %d successful CHECKs of %s on %s, want %d", n, sb.id[:12], e.kind, checks)
	}
	e.stopRemove(sb)
	// containerd DELs on StopPodSandbox and again, with no netns, on
	// RemovePodSandbox; CRI-O on StopPodSandbox only.
	dels := 2
	if e.kind == crioKind {
		dels = 1
	}
	if n := e.logLines("DEL done", sb.id); n != dels {
		t.Errorf("manifold logged %d successful DELs of %s on %s, want %d", n, sb.id[:12], e.kind, dels)
	}
	e.checkGone(sb.id)
	e.checkNodeEmpty()
}

// NADs on the real API server: the NAD is attached and network-status
// patched; with the runtime's annotations the API server counts no pod GET.
// With none, containerd passes null and manifold GETs the pod once; CRI-O
// passes {} (a pod with no annotations), so manifold GETs nothing and
// attaches no NAD.
func runtimeNADs(e *criEnv) {
	t := e.t
	blue := nextSubnet()
	e.bridgeNAD("blue", blue)
	podReads := func() float64 {
		text, err := e.cp.Metrics(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		return controlplane.SumMetric(text, "apiserver_request_total", map[string]string{"resource": "pods", "subresource": "", "verb": "GET"})
	}
	cases := []struct {
		name        string
		annotations bool
		reads       float64
		nad         bool
	}{
		{"annotations from the runtime", true, 0, true},
		{"null annotations", false, 1, true},
	}
	if e.kind == crioKind {
		cases[1].name, cases[1].reads, cases[1].nad = "empty annotations", 0, false
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			p := e.pod(e.ns, map[string]string{annotNetworks: "blue"})
			before := podReads()
			sb := e.mustRun(p, tc.annotations)
			if !tc.nad {
				if got := podReads() - before; got != tc.reads {
					t.Errorf("pod GETs during RunPodSandbox: %v, want %v", got, tc.reads)
				}
				e.waitStatus(p, 2)
				if got := sorted(e.netnsLinks(sb)); !slices.Equal(got, []string{"eth0", "lo", "net1"}) {
					t.Errorf("links in the sandbox = %v, want eth0, lo, net1", got)
				}
				e.stopRemove(sb)
				e.checkGone(sb.id)
				return
			}
			ips := e.waitStatus(p, 3)
			if got := podReads() - before; got != tc.reads {
				t.Errorf("pod GETs during RunPodSandbox: %v, want %v", got, tc.reads)
			}
			if !blue.Contains(net.ParseIP(ips["net2"])) {
				t.Errorf("net2 = %q, want an address in the NAD's %s (network-status %v)", ips["net2"], blue, ips)
			}
			if got := sorted(e.netnsLinks(sb)); !slices.Equal(got, []string{"eth0", "lo", "net1", "net2"}) {
				t.Errorf("links in the sandbox = %v, want eth0, lo, net1, net2", got)
			}
			e.stopRemove(sb)
			e.checkGone(sb.id)
		})
	}
	e.checkNodeEmpty()
}

// STATUS through the CRI: NetworkReady is true; false with manifold's
// message while the readiness file is missing; true again once it is back.
// On CRI-O, which asks STATUS only until its first success after a start,
// the file drives NetworkReady at start: see crioStatus.
func runtimeStatus(e *criEnv) {
	t := e.t
	if e.kind == crioKind {
		crioStatus(e)
		return
	}
	e.waitNetworkReady(true)
	if err := os.Remove(e.readyFile); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			os.WriteFile(e.readyFile, nil, 0o644)
		}
	}()
	msg := e.waitNetworkReady(false)
	t.Logf("NetworkReady false: %s", msg)
	if want := "readiness indicator file " + e.readyFile + " is missing"; !strings.Contains(msg, want) {
		t.Errorf("NetworkReady message %q does not hold manifold's %q", msg, want)
	}
	e.writeFile(e.readyFile, "")
	restored = true
	e.waitNetworkReady(true)
}

// Failures: a missing NAD and a failing delegate each fail RunPodSandbox
// with manifold's message, and nothing is left (the failing delegate comes
// after eth0 and net1, which are rolled back).
func runtimeFailures(e *criEnv) {
	t := e.t
	p := e.pod(e.ns, map[string]string{annotNetworks: "nowhere"})
	_, err := e.run(p, true)
	wantErr(t, err, "network "+e.ns+"/nowhere: NetworkAttachmentDefinition not found")
	e.checkNodeEmpty()

	br := testenv.UniqueName("mfbad")
	t.Cleanup(func() { testenv.DeleteLink(br) })
	e.nad(e.ns, "broken", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"broken-net","plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":"10.231.0.0/33","dataDir":%q}}]}`, br, e.leaseDir))
	p = e.pod(e.ns, map[string]string{annotNetworks: "broken"})
	_, err = e.run(p, true)
	wantErr(t, err, "broken", "10.231.0.0/33")
	e.checkNodeEmpty()
}

// Load: 20 sandboxes at once get distinct addresses and are torn down clean.
func runtimeLoad(e *criEnv) {
	t := e.t
	const n = 20
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = e.pod(e.ns, nil)
	}
	sbs := make([]*criSandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() { sbs[i], errs[i] = e.run(pods[i], true) })
	}
	wg.Wait()
	seen := map[string]int{}
	for i, sb := range sbs {
		if errs[i] != nil {
			t.Errorf("RunPodSandbox %d: %v", i, errs[i])
			continue
		}
		ip, err := e.node.SandboxIP(e.ctx(), sb.id)
		if err != nil || !e.cluster.Contains(net.ParseIP(ip)) {
			t.Errorf("sandbox %d: IP %q (%v), want one in %s", i, ip, err, e.cluster)
		}
		if j, dup := seen[ip]; dup {
			t.Errorf("sandboxes %d and %d share %s", j, i, ip)
		}
		seen[ip] = i
	}
	for i, sb := range sbs {
		if sb != nil {
			wg.Go(func() { errs[i] = e.node.StopRemove(e.ctx(), sb.id) })
		}
	}
	wg.Wait()
	for i, err := range errs {
		if sbs[i] != nil && err != nil {
			t.Errorf("sandbox %d: %v", i, err)
		}
	}
	e.checkNodeEmpty()
}

// Real traffic: a container in pod B listens; a container in pod A connects
// to B over net1 and over eth0 and reads B's answer.
func runtimeTraffic(e *criEnv) {
	t := e.t
	pa, pb := e.pod(e.ns, nil), e.pod(e.ns, nil)
	a, b := e.mustRun(pa, true), e.mustRun(pb, true)
	defer e.stopRemove(a)
	defer e.stopRemove(b)
	if _, err := e.node.RunContainer(e.ctx(), b.id, b.cfg, "server", "/nettool", "listen", "0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	client, err := e.node.RunContainer(e.ctx(), a.id, a.cfg, "client", "/pause")
	if err != nil {
		t.Fatal(err)
	}
	ips := e.waitStatus(pb, 2)
	for _, ifname := range []string{"net1", "eth0"} {
		addr := net.JoinHostPort(ips[ifname], "8080")
		var out, errOut string
		var code int32
		// The server may still be starting; a refused connection is retried.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, errOut, code, err = e.node.Exec(e.ctx(), client, "/nettool", "connect", addr)
			if err == nil && code == 0 || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || code != 0 || strings.TrimSpace(out) != "hello from "+pb.Name {
			t.Errorf("pod A to pod B over %s (%s): exit %d, err %v, out %q, stderr %q; want %q", ifname, addr, code, err, out, errOut, "hello from "+pb.Name)
		}
	}
}

// Runtime crash: the runtime is SIGKILLed with sandboxes running and started
// again; stop and remove are then clean. CRI-O, as it starts, CHECKs every
// sandbox it restores and runs a CNI GC with them all as valid: each
// sandbox is CHECKed once more, and keeps its links.
func runtimeCrash(e *criEnv) {
	t := e.t
	var sbs []*criSandbox
	for range 3 {
		sbs = append(sbs, e.mustRun(e.pod(e.ns, nil), true))
	}
	gcs := e.logLines("GC done", "")
	e.node.Kill()
	if err := e.node.Restart(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.waitNetworkReady(true)
	if e.kind == crioKind {
		e.waitLogLines("GC done", "", gcs+1)
		for _, sb := range sbs {
			if n := e.logLines("CHECK done", sb.id); n != 2 {
				t.Errorf("manifold logged %d CHECKs of %s, want 2 (after ADD, after the restart)", n, sb.id[:12])
			}
			if got := sorted(e.netnsLinks(sb)); !slices.Equal(got, []string{"eth0", "lo", "net1"}) {
				t.Errorf("links in sandbox %s after the restart's GC = %v, want eth0, lo, net1", sb.id[:12], got)
			}
		}
	}
	for _, sb := range sbs {
		e.stopRemove(sb)
		e.checkGone(sb.id)
	}
	e.checkNodeEmpty()
}

// Daemon crash: with the daemon killed, the shim falls back to the manifold
// binary; once the daemon is back it serves again, which the test proves by
// taking the fallback away.
func runtimeDaemonCrash(e *criEnv) {
	t := e.t
	e.daemon.d.Kill(t)
	e.daemon.d = nil
	sb := e.mustRun(e.pod(e.ns, nil), true)
	e.stopRemove(sb)
	e.checkGone(sb.id)

	e.startDaemon()
	// On CRI-O, renaming the fallback away is a change in its bin dir, which
	// it answers with a VERSION that carries no daemonSocket: the shim
	// answers that itself (docs/runtimes.md).
	fallback := filepath.Join(e.plugin["binDir"].(string), "manifold")
	if err := os.Rename(fallback, fallback+".away"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(fallback+".away", fallback)
	sb = e.mustRun(e.pod(e.ns, nil), true)
	e.stopRemove(sb)
	e.checkGone(sb.id)
	e.checkNodeEmpty()
}

// checkNodeEmpty checks that no sandbox has anything left: no file in
// cniDir (records, locks, the results cache), no host-local lease, no port on
// the bridges.
func (e *criEnv) checkNodeEmpty() {
	e.t.Helper()
	for _, l := range e.leftovers() {
		e.t.Error(l)
	}
}

func (e *criEnv) leftovers() []string {
	var out []string
	filepath.Walk(e.cniDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, "file left in cniDir: "+p)
		}
		return nil
	})
	filepath.Walk(e.leaseDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && net.ParseIP(filepath.Base(p)) != nil {
			out = append(out, "host-local lease left: "+p)
		}
		return nil
	})
	for _, br := range []string{e.bridge, e.net1Br} {
		if got := testenv.BridgePorts(e.t, br); len(got) != 0 {
			out = append(out, fmt.Sprintf("ports left on bridge %s: %v", br, got))
		}
	}
	return out
}

// logLines counts manifold's log lines with that message for the container.
func (e *criEnv) logLines(msg, containerID string) int {
	b, _ := os.ReadFile(e.logFile)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) && strings.Contains(l, containerID) {
			n++
		}
	}
	return n
}

// bridgeNAD is a bridge network on its own host bridge (removed when the test
// ends) with host-local IPAM and no gateway.
func (e *criEnv) bridgeNAD(name string, s subnet) {
	e.t.Helper()
	br := testenv.UniqueName("mfnad")
	e.t.Cleanup(func() { testenv.DeleteLink(br) })
	e.nad(e.ns, name, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, name+"-net", br, s, e.leaseDir))
}
