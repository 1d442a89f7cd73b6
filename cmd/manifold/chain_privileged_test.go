package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// writeConfs writes name → body under dir, making subdirectories.
func writeConfs(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recorded reads what the recorder plugin saved of one call, nil if none.
func recorded(t *testing.T, dir, cmd, ifname string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, cmd+"-"+ifname+".json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestSubdirectoryChain: a tuning conf and a recorder placed in the
// subdirectory named after the clusterNetwork conflist's network are chained
// to it, as libcni >= 1.3 (and so containerd, CRI-O, Multus) loads the file:
// the pod's eth0 gets arp_filter=1 from the real tuning plugin. The record
// keeps the chain: with the subdirectory's files gone, DEL still runs the
// chained plugins.
func TestSubdirectoryChain(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	confDir, recordDir := t.TempDir(), t.TempDir()
	conflist := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"podnet","plugins":[%s]}`,
		strings.Replace(n.bridgeConf("1.0.0", "10.201.40.0/24"), `"cniVersion":"1.0.0","name":"br-net",`, "", 1))
	writeConfs(t, confDir, map[string]string{
		"10-podnet.conflist":  conflist,
		"podnet/10-tune.conf": `{"cniVersion":"1.0.0","name":"sysctltwiddle","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}}`,
		"podnet/20-rec.conf":  fmt.Sprintf(`{"type":"recorder","recordDir":%q}`, recordDir),
		"podnet/30-skip.json": `{"type":"not-a-plugin"}`,
		"othernet/10-x.conf":  `{"type":"not-a-plugin"}`,
	})
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"clusterNetwork": filepath.Join(confDir, "10-podnet.conflist")}))
	pod, netns := newPod(t)
	if got := testenv.NetnsSysctl(t, netns, "net.ipv4.conf.all.arp_filter"); got != "0" {
		t.Fatalf("a new netns has arp_filter %s; the test needs 0", got)
	}
	if _, err := n.rt.Add(ctx, conf, pod); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
	if got := testenv.NetnsSysctl(t, netns, "net.ipv4.conf.eth0.arp_filter"); got != "1" {
		t.Errorf("eth0 arp_filter = %s, want 1 from the chained tuning plugin", got)
	}
	add := recorded(t, recordDir, "ADD", "eth0")
	if add == nil {
		t.Fatal("the chained recorder did not run at ADD")
	}
	if stdin, _ := add["stdin"].(map[string]any); stdin["name"] != "podnet" || stdin["prevResult"] == nil {
		t.Errorf("the recorder ran as %v, want a plugin of network podnet with the chain's prevResult", stdin)
	}
	if err := n.rt.Check(ctx, conf, pod); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	if err := os.RemoveAll(filepath.Join(confDir, "podnet")); err != nil {
		t.Fatal(err)
	}
	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if recorded(t, recordDir, "DEL", "eth0") == nil {
		t.Error("DEL did not run the chained recorder once its file was gone: the record lost the chain")
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v, want none", got)
	}
	if got := leases(t, n.leaseDir); len(got) != 0 {
		t.Errorf("leases after DEL = %v, want none", got)
	}
}

// TestAuxiliaryChain: with auxiliaryCNIChainName, the .conf files of the
// directory of that name next to clusterNetwork's file run as a chain of
// their own after every other network, behind manifold's in-process
// passthru: the real tuning plugin sets eth0's arp_filter, as in Multus's
// e2e test, and the recorder sees the chain run on net2 (after eth0 and
// net1) with an empty prevResult. It makes no interface. DEL runs it first,
// from the record, after its files are gone; so does GC of a stale
// container.
func TestAuxiliaryChain(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	confDir, recordDir := t.TempDir(), t.TempDir()
	writeConfs(t, confDir, map[string]string{
		"10-br.conflist":            fmt.Sprintf(`{"cniVersion":"1.0.0","name":"br-net","plugins":[%s]}`, n.bridgeConf("1.0.0", "10.201.41.0/24")),
		"vendor-chain/10-tune.conf": `{"cniVersion":"1.0.0","name":"sysctltwiddle","type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_filter":"1"}}`,
		"vendor-chain/20-rec.conf":  fmt.Sprintf(`{"type":"recorder","recordDir":%q}`, recordDir),
	})
	for _, verb := range []string{"DEL", "GC"} {
		t.Run(verb, func(t *testing.T) {
			for _, f := range []string{"ADD-net2.json", "DEL-net2.json", "CHECK-net2.json"} {
				_ = os.Remove(filepath.Join(recordDir, f))
			}
			ptpDir := t.TempDir()
			writeConfs(t, ptpDir, map[string]string{"ptp.conf": ptpConf("1.0.0", "10.201.42.7/24")})
			conflist := n.manifoldConf(t, "1.1.0", map[string]any{
				"clusterNetwork":        filepath.Join(confDir, "10-br.conflist"),
				"defaultNetworks":       []string{filepath.Join(ptpDir, "ptp.conf")},
				"auxiliaryCNIChainName": "vendor-chain",
			})
			conf := testenv.Conf(t, conflist)
			pod, netns := newPod(t)
			if _, err := n.rt.Add(ctx, conf, pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
			if got := testenv.NetnsSysctl(t, netns, "net.ipv4.conf.eth0.arp_filter"); got != "1" {
				t.Errorf("eth0 arp_filter = %s, want 1 from the auxiliary chain's tuning", got)
			}
			links := podLinks(t, netns)
			if _, ok := links["net1"]; !ok || len(links) != 2 {
				t.Errorf("pod links %v, want eth0 and net1 only: the auxiliary chain makes no interface", links)
			}
			add := recorded(t, recordDir, "ADD", "net2")
			if add == nil {
				t.Fatalf("the auxiliary chain's recorder did not run on net2 (files: %v)", recordFiles(t, recordDir))
			}
			stdin, _ := add["stdin"].(map[string]any)
			if stdin["name"] != "vendor-chain" || stdin["cniVersion"] != "1.1.0" || stdin["prevResult"] == nil {
				t.Errorf("the recorder ran as %v, want network vendor-chain in manifold's cniVersion with a prevResult", stdin)
			}
			if err := n.rt.Check(ctx, conf, pod); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := os.RemoveAll(filepath.Join(confDir, "vendor-chain")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				writeConfs(t, confDir, map[string]string{
					"vendor-chain/10-tune.conf": `{"cniVersion":"1.0.0","name":"sysctltwiddle","type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_filter":"1"}}`,
					"vendor-chain/20-rec.conf":  fmt.Sprintf(`{"type":"recorder","recordDir":%q}`, recordDir),
				})
			})
			if verb == "DEL" {
				if err := n.rt.Del(ctx, conf, pod); err != nil {
					t.Fatalf("DEL: %v", err)
				}
			} else {
				runGC(t, n, conflist) // no valid attachments: the container is stale
			}
			if recorded(t, recordDir, "DEL", "net2") == nil {
				t.Errorf("%s did not run the auxiliary chain from the record once its files were gone", verb)
			}
			if got := podLinks(t, netns); len(got) != 0 {
				t.Errorf("pod links after %s = %v, want none", verb, got)
			}
			if got := recordFiles(t, n.cniDir); len(got) != 0 && verb == "DEL" {
				t.Errorf("files left in cniDir after DEL: %v", got)
			}
		})
	}
}

// TestThickChains: the node daemon (with --host-root /, so through the
// chrooted exec, and no manifold binary to fall back to) loads the
// clusterNetwork conflist with its subdirectory chain and runs the
// auxiliary chain behind its in-process passthru, as the thin binary does;
// DEL runs both from the record after their files are gone.
func TestThickChains(t *testing.T) {
	n := newThickNode(t, false)
	d := n.startDaemon(t, "--host-root", "/")
	ctx := context.Background()
	confDir, recordDir := t.TempDir(), t.TempDir()
	writeConfs(t, confDir, map[string]string{
		"10-br.conflist":         fmt.Sprintf(`{"cniVersion":"1.0.0","name":"br-net","plugins":[%s]}`, n.bridgeConf("1.0.0", "10.201.43.0/24")),
		"br-net/10-tune.conf":    `{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_filter":"1"}}`,
		"vendor-chain/10.conf":   `{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.arp_announce":"2"}}`,
		"vendor-chain/20-r.conf": fmt.Sprintf(`{"type":"recorder","recordDir":%q}`, recordDir),
	})
	conflist := bytes.Replace(n.manifoldConf(t, "1.1.0", map[string]any{
		"daemonSocket":          d.Socket,
		"clusterNetwork":        filepath.Join(confDir, "10-br.conflist"),
		"auxiliaryCNIChainName": "vendor-chain",
	}), []byte(`"type":"manifold"`), []byte(`"type":"manifold-shim"`), 1)
	conf := testenv.Conf(t, conflist)
	pod, netns := newPod(t)
	if _, err := n.rt.Add(ctx, conf, pod); err != nil {
		t.Fatalf("ADD through the daemon: %v", err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
	for key, want := range map[string]string{"net.ipv4.conf.eth0.arp_filter": "1", "net.ipv4.conf.eth0.arp_announce": "2"} {
		if got := testenv.NetnsSysctl(t, netns, key); got != want {
			t.Errorf("%s = %s, want %s from a chained tuning", key, got, want)
		}
	}
	if recorded(t, recordDir, "ADD", "net1") == nil {
		t.Error("the auxiliary chain did not run on net1")
	}
	for _, dir := range []string{"br-net", "vendor-chain"} {
		if err := os.RemoveAll(filepath.Join(confDir, dir)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Fatalf("DEL through the daemon: %v", err)
	}
	if recorded(t, recordDir, "DEL", "net1") == nil {
		t.Error("DEL did not run the auxiliary chain from the record")
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after DEL = %v, want none", got)
	}
}
