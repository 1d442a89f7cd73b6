package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/scratch"
)

// concurrentWait bounds how long a test waits for the networks of a wave to
// be under way together. In order the second never starts while the first
// is held, so the wait runs out and the test fails.
const concurrentWait = 20 * time.Second

// chained appends plugins to a single delegate config, as a conflist.
func chained(conf string, plugins ...map[string]any) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	list := []any{m}
	for _, p := range plugins {
		list = append(list, p)
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": m["cniVersion"], "name": m["name"], "plugins": list})
	return string(b)
}

func gate(reached, release string) map[string]any {
	return map[string]any{"type": "gate", "reached": reached, "release": release}
}

// bothExist waits, at most concurrentWait, until every path exists.
func bothExist(paths ...string) bool {
	for deadline := time.Now().Add(concurrentWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all := true
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// With concurrentAttachments, a pod's real extra networks (macvlan and ptp)
// are attached at the same time: each is held by a gate plugin until both
// have been reached. The pod then looks as it does after an ADD in order of
// the same delegates: the same interfaces, addresses and routes, the same
// record and the same libcni cache entries; DEL removes it all.
func TestConcurrentAttachmentsRealPlugins(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	dir := t.TempDir()
	reached1, reached2, release := filepath.Join(dir, "net1"), filepath.Join(dir, "net2"), filepath.Join(dir, "release")
	delegates := []string{
		n.bridgeConf("1.0.0", "10.223.1.0/24"),
		chained(n.macvlanConf("1.0.0", parent, "10.223.2.0/24"), gate(reached1, release)),
		chained(ptpConf("1.0.0", "10.223.3.7/24"), gate(reached2, release)),
	}

	type outcome struct {
		result  *types100.Result
		links   map[string][]string
		routes  []string
		record  *scratch.Record
		entries []string
	}
	attach := func(concurrent bool) outcome {
		t.Helper()
		conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"concurrentAttachments": concurrent}, delegates...))
		pod, netns := newPod(t)
		t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })
		done := make(chan error, 1)
		var res types.Result
		go func() {
			var err error
			res, err = n.rt.Add(ctx, conf, pod)
			done <- err
		}()
		if concurrent && !bothExist(reached1, reached2) {
			t.Errorf("net1 and net2 were not under way at the same time: attached in order")
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("ADD (concurrentAttachments %v): %v", concurrent, err)
		}
		cur, err := types100.NewResultFromResult(res)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := (&scratch.Store{Dir: n.cniDir}).Load(pod.ContainerID)
		if err != nil || rec == nil {
			t.Fatalf("record after ADD: %v, %v", rec, err)
		}
		o := outcome{result: cur, links: subnetsOf(podLinks(t, netns)), routes: podRoutes(t, netns), record: rec}
		for _, f := range recordFiles(t, n.cniDir) {
			if strings.HasPrefix(f, "results/") {
				o.entries = append(o.entries, strings.Replace(f, pod.ContainerID, "<id>", 1))
			}
		}
		if err := n.rt.Del(ctx, conf, pod); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if got := podLinks(t, netns); len(got) != 0 {
			t.Errorf("pod links after DEL = %v, want none", got)
		}
		assertClean(t, n, "DEL")
		for _, f := range []string{reached1, reached2, release} {
			os.Remove(f)
		}
		return o
	}
	inOrder := attach(false)
	atOnce := attach(true)

	if !reflect.DeepEqual(atOnce.links, inOrder.links) {
		t.Errorf("pod links %v, in order %v", atOnce.links, inOrder.links)
	}
	if !reflect.DeepEqual(atOnce.routes, inOrder.routes) {
		t.Errorf("pod routes %v, in order %v", atOnce.routes, inOrder.routes)
	}
	if !reflect.DeepEqual(atOnce.entries, inOrder.entries) || len(atOnce.entries) != 3 {
		t.Errorf("libcni cache entries %v, in order %v, want 3", atOnce.entries, inOrder.entries)
	}
	if got, want := atOnce.result.Interfaces, inOrder.result.Interfaces; len(got) != len(want) || len(atOnce.result.IPs) != len(inOrder.result.IPs) {
		t.Errorf("result interfaces %v, IPs %v; in order %v, %v", got, atOnce.result.IPs, want, inOrder.result.IPs)
	}
	// Container IDs and the config's own key differ; the attachments do not.
	if !reflect.DeepEqual(atOnce.record.Attachments, inOrder.record.Attachments) {
		t.Errorf("recorded attachments\n%+v\nin order\n%+v", atOnce.record.Attachments, inOrder.record.Attachments)
	}
}

// subnetsOf replaces each address with its subnet: host-local hands the
// next pod the next address.
func subnetsOf(links map[string][]string) map[string][]string {
	out := map[string][]string{}
	for name, addrs := range links {
		out[name] = []string{}
		for _, a := range addrs {
			if _, n, err := net.ParseCIDR(a); err == nil {
				a = n.String()
			}
			out[name] = append(out[name], a)
		}
	}
	return out
}

// A delegate that fails among networks attached at once: net2 fails only
// once net3 (a real ptp with host-local) is under way, so it has certainly
// been attempted. ADD fails with net2's error, and everything attempted,
// eth0, net1 and net3, is undone: no link, lease, record or cache entry is
// left.
func TestConcurrentAttachmentsRollback(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	ctx := context.Background()
	dir := t.TempDir()
	reached3, open := filepath.Join(dir, "net3"), filepath.Join(dir, "open")
	if err := os.WriteFile(open, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dbgPath := filepath.Join(dir, "dbg.json")
	if err := (&debug.Debug{ReportError: "net2 refuses", ReportErrorCode: 42}).WriteDebug(dbgPath); err != nil {
		t.Fatal(err)
	}
	failing := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"failing-net","plugins":[{"type":"gate","reached":%q,"release":%q},{"type":"noop","debugFile":%q}]}`,
		filepath.Join(dir, "net2"), reached3, dbgPath)
	ptpLeased := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ptp-net","type":"ptp","ipam":{"type":"host-local","subnet":"10.224.3.0/24","dataDir":%q}}`, n.leaseDir)
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"concurrentAttachments": true},
		n.bridgeConf("1.0.0", "10.224.1.0/24"),
		n.macvlanConf("1.0.0", parent, "10.224.2.0/24"),
		failing,
		chained(ptpLeased, gate(reached3, open))))
	pod, netns := newPod(t)
	t.Cleanup(func() { _ = n.rt.Del(ctx, conf, pod) })

	_, err := n.rt.Add(ctx, conf, pod)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 42 || !strings.Contains(te.Msg, "net2 refuses") || !strings.Contains(te.Msg, "net2") {
		t.Fatalf("ADD = %v, want net2's failure, code 42, naming net2", err)
	}
	if _, err := os.Stat(reached3); err != nil {
		t.Errorf("net3 was not attempted alongside net2 (%v): attached in order", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("pod links after the failed ADD = %v, want none", got)
	}
	assertClean(t, n, "failed ADD")
	if err := n.rt.Del(ctx, conf, pod); err != nil {
		t.Errorf("the runtime's DEL after the failed ADD: %v", err)
	}
}
