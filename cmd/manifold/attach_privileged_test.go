package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/plugins/test/noop/debug"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// node is one test node: a bin dir with manifold and the plugins, manifold's own
// dirs, and host-local's lease dir, all removed when the test ends.
type node struct {
	rt       *testenv.Runtime
	cniDir   string
	leaseDir string
	bridge   string
}

func newNode(t *testing.T) *node {
	testenv.RequirePrivileged(t)
	n := &node{
		rt:       testenv.NewRuntime(t, testenv.BinDir(t)),
		cniDir:   t.TempDir(),
		leaseDir: t.TempDir(),
		bridge:   testenv.UniqueName("mfbr"),
	}
	t.Cleanup(func() { testenv.DeleteLink(n.bridge) })
	return n
}

// manifoldConf wraps delegates in manifold's config, as the only plugin of a
// conflist.
func (n *node) manifoldConf(t *testing.T, cniVersion string, extra map[string]any, delegates ...string) []byte {
	t.Helper()
	plugin := map[string]any{
		"type":      "manifold",
		"cniDir":    n.cniDir,
		"binDir":    n.rt.BinDir,
		"confDir":   filepath.Join(n.cniDir, "net.d"),
		"delegates": rawList(delegates),
	}
	for k, v := range extra {
		plugin[k] = v
	}
	b, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": "manifold-test", "plugins": []any{plugin}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawList(ss []string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

func (n *node) bridgeConf(version, subnet string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"br-net","type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q,"routes":[{"dst":"0.0.0.0/0"}]}}`, version, n.bridge, subnet, n.leaseDir)
}

func (n *node) macvlanConf(version, parent, subnet string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"mv-net","type":"macvlan","master":%q,"mode":"bridge",
		"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}`, version, parent, subnet, n.leaseDir)
}

func ptpConf(version, addr string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"ptp-net","type":"ptp",
		"ipam":{"type":"static","addresses":[{"address":%q,"gateway":%q}],"routes":[{"dst":"192.168.250.0/24"}]}}`, version, addr, gatewayOf(addr))
}

func newPod(t *testing.T) (*testenv.Pod, ns.NetNS) {
	netns := testenv.NetNS(t)
	id := testenv.UniqueName("ctr") + testenv.UniqueName("x")
	return &testenv.Pod{
		ContainerID: id,
		NetNS:       netns.Path(),
		Args:        testenv.PodArgs("default", "pod-"+id, "uid-"+id, id),
	}, netns
}

// podLinks lists the non-loopback links in a netns with their IPv4 addresses.
func podLinks(t *testing.T, netns ns.NetNS) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := netns.Do(func(ns.NetNS) error {
		links, err := testenv.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().Name == "lo" {
				continue
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			out[l.Attrs().Name] = []string{}
			for _, a := range addrs {
				out[l.Attrs().Name] = append(out[l.Attrs().Name], a.IPNet.String())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// podRoutes lists the IPv4 routes in a netns as "dst via gw dev".
func podRoutes(t *testing.T, netns ns.NetNS) []string {
	t.Helper()
	var out []string
	err := netns.Do(func(ns.NetNS) error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			l, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				return err
			}
			dst := "default"
			if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
				dst = r.Dst.String()
			}
			out = append(out, fmt.Sprintf("%s via %v dev %s", dst, r.Gw, l.Attrs().Name))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// leases lists host-local's lease files (anything but its lock and last-reserved
// markers) under the lease dir.
func leases(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		base := filepath.Base(p)
		if base == "lock" || strings.HasPrefix(base, "last_reserved_ip") {
			return nil
		}
		out = append(out, p)
		return nil
	})
	return out
}

// recordFiles lists what manifold keeps in cniDir for containers: records, libcni
// cache entries and lock files.
func recordFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	return out
}

func TestThreeDelegatesAddDel(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.201.1.0/24"),
		n.macvlanConf("0.4.0", parent, "10.201.2.0/24"),
		ptpConf("0.3.1", "10.201.3.7/24")))
	pod, netns := newPod(t)

	res, err := n.rt.Add(ctx, conf, pod)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })

	// The runtime gets the default network's result, in manifold's cniVersion.
	if res.Version() != "1.0.0" {
		t.Errorf("result version = %s, want 1.0.0", res.Version())
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.IPs) != 1 || !strings.HasPrefix(cur.IPs[0].Address.String(), "10.201.1.") {
		t.Errorf("result IPs = %v, want one address in 10.201.1.0/24", cur.IPs)
	}

	links := podLinks(t, netns)
	want := map[string]string{"eth0": "10.201.1.", "net1": "10.201.2.", "net2": "10.201.3.7/24"}
	if len(links) != len(want) {
		t.Errorf("pod links = %v, want exactly %v", links, want)
	}
	for name, prefix := range want {
		addrs := links[name]
		if len(addrs) != 1 || !strings.HasPrefix(addrs[0], prefix) {
			t.Errorf("%s addresses = %v, want one starting %s", name, addrs, prefix)
		}
	}
	routes := podRoutes(t, netns)
	if !contains(routes, "default via 10.201.1.1 dev eth0") {
		t.Errorf("routes = %v, want the default via eth0's gateway", routes)
	}
	if !contains(routes, "192.168.250.0/24 via 10.201.3.1 dev net2") {
		t.Errorf("routes = %v, want 192.168.250.0/24 via net2's ptp gateway", routes)
	}
	if got := leases(t, n.leaseDir); len(got) != 2 {
		t.Errorf("host-local leases after ADD = %v, want 2", got)
	}
	if got := testenv.BridgePorts(t, n.bridge); len(got) != 1 {
		t.Errorf("bridge ports after ADD = %v, want 1", got)
	}

	if err := n.rt.Check(ctx, conf, pod); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v, want none", got)
	}
	if got := testenv.BridgePorts(t, n.bridge); len(got) != 0 {
		t.Errorf("bridge ports after DEL = %v, want none", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 0 {
		t.Errorf("host-local leases after DEL = %v, want none", got)
	}
	if got := recordFiles(t, n.cniDir); len(got) != 0 {
		t.Errorf("files left in cniDir after DEL = %v, want none", got)
	}
	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Errorf("second DEL: %v", err)
	}
}

// noopConf is a noop delegate that logs every call to cmdLog and behaves as its
// debug file says.
func noopConf(t *testing.T, name, cmdLog string, fail bool) string {
	t.Helper()
	dbg := &debug.Debug{ReportResult: `{"cniVersion":"1.0.0","ips":[{"address":"10.202.0.9/24"}]}`}
	if fail {
		dbg = &debug.Debug{ReportError: "injected failure in " + name, ReportErrorCode: 42}
	}
	path := filepath.Join(t.TempDir(), name+".json")
	if err := dbg.WriteDebug(path); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"noop","debugFile":%q,"commandLog":%q}`, name, path, cmdLog)
}

func TestRollback(t *testing.T) {
	for _, failAt := range []int{1, 2} {
		t.Run(fmt.Sprintf("delegate %d fails", failAt+1), func(t *testing.T) {
			n := newNode(t)
			ctx := context.Background()
			cmdLog := filepath.Join(t.TempDir(), "cmdlog.json")
			if err := os.WriteFile(cmdLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
				n.bridgeConf("1.0.0", "10.203.1.0/24"),
				noopConf(t, "noop-a", cmdLog, failAt == 1),
				noopConf(t, "noop-b", cmdLog, failAt == 2)))
			pod, netns := newPod(t)

			_, err := n.rt.Add(ctx, conf, pod)
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("ADD error = %v, want a CNI error", err)
			}
			failed := []string{"", "noop-a", "noop-b"}[failAt]
			if te.Code != 42 || !strings.Contains(te.Msg, "injected failure in "+failed) || !strings.Contains(te.Msg, fmt.Sprintf("net%d", failAt)) {
				t.Errorf("ADD error = code %d %q, want code 42 naming %s and net%d", te.Code, te.Msg, failed, failAt)
			}

			entries, err := debug.ReadCommandLog(cmdLog)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Command+" "+e.CmdArgs.IfName)
			}
			want := map[int][]string{
				1: {"ADD net1", "DEL net1"},
				2: {"ADD net1", "ADD net2", "DEL net2", "DEL net1"},
			}[failAt]
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("noop command log = %v, want %v", got, want)
			}
			if got := podLinks(t, netns); len(got) != 0 {
				t.Errorf("pod links after failed ADD = %v, want none", got)
			}
			if got := leases(t, n.leaseDir); len(got) != 0 {
				t.Errorf("leases after failed ADD = %v, want none", got)
			}
			if got := testenv.BridgePorts(t, n.bridge); len(got) != 0 {
				t.Errorf("bridge ports after failed ADD = %v, want none", got)
			}
			if got := recordFiles(t, n.cniDir); len(got) != 0 {
				t.Errorf("files left in cniDir after failed ADD = %v, want none", got)
			}
		})
	}
}

func TestConfigVersions(t *testing.T) {
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			ctx := context.Background()
			conf := testenv.Conf(t, n.manifoldConf(t, v, nil,
				n.bridgeConf(v, "10.204.1.0/24"),
				ptpConf("1.0.0", "10.204.3.7/24")))
			pod, netns := newPod(t)
			res, err := n.rt.Add(ctx, conf, pod)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if res.Version() != v {
				t.Errorf("result version = %s, want %s", res.Version(), v)
			}
			links := podLinks(t, netns)
			if len(links["eth0"]) != 1 || len(links["net1"]) != 1 {
				t.Errorf("pod links = %v, want eth0 and net1 with one address each", links)
			}
			if err := n.rt.Del(ctx, conf, pod); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := podLinks(t, netns); len(got) != 0 {
				t.Errorf("pod links after DEL = %v", got)
			}
			if got := leases(t, n.leaseDir); len(got) != 0 {
				t.Errorf("leases after DEL = %v", got)
			}
			if err := n.rt.Del(ctx, conf, pod); err != nil {
				t.Errorf("second DEL: %v", err)
			}
		})
	}
}

// gatewayOf gives the .1 of an IPv4 CIDR's subnet.
func gatewayOf(cidr string) string {
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		panic("bad test CIDR " + cidr)
	}
	gw := n.IP.To4()
	gw[3]++
	return gw.String()
}

// TestDelegatesStartEarly: with real delegates, every delegate process that
// manifold starts before its turn is the one that serves the call (so the
// predicted path and environment match libcni's exactly), for ADD and DEL, the
// default network's included; with prestartDelegates off none is started.
func TestDelegatesStartEarly(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("prestartDelegates=%v", on), func(t *testing.T) {
			n := newNode(t)
			parent := testenv.VethParent(t)
			ctx := context.Background()
			logFile := filepath.Join(t.TempDir(), "manifold.log")
			conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0",
				map[string]any{"logLevel": "debug", "logFile": logFile, "prestartDelegates": on},
				n.bridgeConf("1.0.0", "10.209.1.0/24"),
				n.macvlanConf("1.0.0", parent, "10.209.2.0/24"),
				ptpConf("1.0.0", "10.209.3.7/24")))
			pod, netns := newPod(t)
			if _, err := n.rt.Add(ctx, conf, pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
			if got := podLinks(t, netns); len(got) != 3 {
				t.Errorf("pod links = %v, want eth0, net1, net2", got)
			}
			if err := n.rt.Del(ctx, conf, pod); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := leases(t, n.leaseDir); len(got) != 0 {
				t.Errorf("leases after DEL = %v, want none", got)
			}
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			// On a busy machine some starts are skipped (a long run queue;
			// ADD may skip the default network twice, before and after the
			// reads): each of the 3 calls per verb is started early and used,
			// or skipped, and nothing is discarded.
			var verbs []string
			for _, line := range strings.Split(string(b), "\n") {
				var e struct {
					Msg, Cmd                              string
					Started, Used, Discarded, SkippedBusy int
				}
				if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "delegate processes started early" {
					continue
				}
				verbs = append(verbs, e.Cmd)
				if e.Used != e.Started || e.Discarded != 0 || e.Started+e.SkippedBusy < 3 {
					t.Errorf("%s: started %d, used %d, discarded %d, skipped %d; want each of 3 calls started and used, or skipped",
						e.Cmd, e.Started, e.Used, e.Discarded, e.SkippedBusy)
				}
			}
			want := "ADD,DEL"
			if !on {
				want = ""
			}
			if got := strings.Join(verbs, ","); got != want {
				t.Errorf("early-start reports for %q, want %q", got, want)
			}
		})
	}
}
