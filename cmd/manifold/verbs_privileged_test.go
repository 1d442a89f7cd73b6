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
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// execVerb runs manifold for a verb that carries no container (STATUS, GC) and
// returns the CNI error it printed, if any.
func execVerb(t *testing.T, n *node, verb string, conf []byte) *types.Error {
	t.Helper()
	c := exec.Command(filepath.Join(n.rt.BinDir, "manifold"))
	c.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_PATH="+n.rt.BinDir)
	c.Stdin = bytes.NewReader(conf)
	out, err := c.Output()
	if err == nil {
		return nil
	}
	te := &types.Error{}
	if jerr := json.Unmarshal(out, te); jerr != nil {
		t.Fatalf("%s: %v, stdout %q is not a CNI error", verb, err, out)
	}
	return te
}

func withKey(t *testing.T, conf []byte, key string, value any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	b, _ := json.Marshal(m)
	return b
}

func TestCheck(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	pod, netns := newPod(t)
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.221.1.0/24"),
		ptpConf("1.0.0", "10.221.3.7/24"),
		// A network below 0.4.0 has no CHECK; it must be skipped, not fail.
		strings.Replace(ptpConf("0.3.1", "10.221.4.7/24"), `"ptp-net"`, `"old-net"`, 1)))
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, list, pod) })
	if err := n.rt.Check(ctx, list, pod); err != nil {
		t.Fatalf("CHECK of a healthy pod: %v", err)
	}
	// Break net1 behind the plugins' backs: CHECK must say so and name it.
	err := netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = n.rt.Check(ctx, list, pod)
	if err == nil || !strings.Contains(err.Error(), "net1") || !strings.Contains(err.Error(), "ptp-net") {
		t.Errorf("CHECK with net1 gone = %v, want an error naming ptp-net and net1", err)
	}
}

func TestCheckRespectsDisableCheck(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	pod, netns := newPod(t)
	disabled := `{"cniVersion":"1.0.0","name":"quiet-net","disableCheck":true,"plugins":[` + ptpConf("1.0.0", "10.222.3.7/24") + `]}`
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil, n.bridgeConf("1.0.0", "10.222.1.0/24"), disabled))
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.rt.Del(ctx, list, pod) })
	_ = netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err == nil {
			err = netlink.LinkDel(l)
		}
		return err
	})
	if err := n.rt.Check(ctx, list, pod); err != nil {
		t.Errorf("CHECK = %v, want success: the broken network has disableCheck", err)
	}
}

func TestStatus(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	dbgPath := filepath.Join(dir, "dbg.json")
	noop := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"noop-net","type":"noop","debugFile":%q}`, dbgPath)
	if err := (&debug.Debug{}).WriteDebug(dbgPath); err != nil {
		t.Fatal(err)
	}
	conf := singlePlugin(t, n.manifoldConf(t, "1.1.0", map[string]any{"readinessindicatorfile": ready}, noop))

	if te := execVerb(t, n, "STATUS", conf); te == nil || te.Code != 50 || !strings.Contains(te.Msg, ready) {
		t.Errorf("STATUS without the readiness file = %v, want code 50 naming it", te)
	}
	if err := os.WriteFile(ready, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if te := execVerb(t, n, "STATUS", conf); te != nil {
		t.Errorf("STATUS when ready = %v, want success", te)
	}
	// The default network's own answer, code included, comes through.
	if err := (&debug.Debug{ReportError: "limited", ReportErrorCode: 51}).WriteDebug(dbgPath); err != nil {
		t.Fatal(err)
	}
	if te := execVerb(t, n, "STATUS", conf); te == nil || te.Code != 51 || !strings.Contains(te.Msg, "limited") {
		t.Errorf("STATUS with a degraded default network = %v, want code 51", te)
	}
}

func TestReadinessIndicator(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	ready := filepath.Join(t.TempDir(), "ready")
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0",
		map[string]any{"readinessindicatorfile": ready, "readinessTimeout": "300ms"},
		n.bridgeConf("1.0.0", "10.223.1.0/24")))
	pod, netns := newPod(t)
	_, err := n.rt.Add(ctx, list, pod)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 11 || !strings.Contains(te.Msg, ready) {
		t.Fatalf("ADD without the readiness file = %v, want code 11 naming it", err)
	}
	if got := podLinks(t, netns); len(got) != 0 {
		t.Errorf("links after the refused ADD: %v", got)
	}
	// DEL never waits for readiness: with a bound of an hour, a DEL that waited
	// would hang the test until its timeout.
	hour := testenv.Conf(t, n.manifoldConf(t, "1.0.0",
		map[string]any{"readinessindicatorfile": ready, "readinessTimeout": "1h"},
		n.bridgeConf("1.0.0", "10.223.1.0/24")))
	if err := n.rt.Del(ctx, hour, pod); err != nil {
		t.Errorf("DEL without the readiness file: %v", err)
	}
	// Once the file appears mid-wait, ADD goes ahead.
	list = testenv.Conf(t, n.manifoldConf(t, "1.0.0",
		map[string]any{"readinessindicatorfile": ready, "readinessTimeout": "30s"},
		n.bridgeConf("1.0.0", "10.223.1.0/24")))
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(ready, nil, 0o600)
	}()
	if _, err := n.rt.Add(ctx, list, pod); err != nil {
		t.Fatalf("ADD once ready: %v", err)
	}
	if err := n.rt.Del(ctx, list, pod); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, "after DEL")
}

func TestGC(t *testing.T) {
	for _, key := range []string{"cni.dev/valid-attachments", "cni.dev/attachments"} {
		t.Run(key, func(t *testing.T) {
			n := newNode(t)
			ctx := context.Background()
			cmdLog := filepath.Join(t.TempDir(), "cmdlog.json")
			if err := os.WriteFile(cmdLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			conflist := n.manifoldConf(t, "1.1.0", nil,
				n.bridgeConf("1.1.0", "10.224.1.0/24"),
				strings.Replace(noopConf(t, "noop-gc", cmdLog, false), `"1.0.0","name"`, `"1.1.0","name"`, 1))
			list := testenv.Conf(t, conflist)
			keep, keepNS := newPod(t)
			drop, dropNS := newPod(t)
			for _, p := range []*testenv.Pod{keep, drop} {
				if _, err := n.rt.Add(ctx, list, p); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _ = n.rt.Del(ctx, list, keep) })

			valid := []map[string]string{{"containerID": keep.ContainerID, "ifname": "eth0"}}
			conf := withKey(t, singlePlugin(t, conflist), key, valid)
			if te := execVerb(t, n, "GC", conf); te != nil {
				t.Fatalf("GC: %v", te)
			}
			if got := podLinks(t, dropNS); len(got) != 0 {
				t.Errorf("stale pod still has links after GC: %v", got)
			}
			if _, err := os.Stat(filepath.Join(n.cniDir, drop.ContainerID)); !os.IsNotExist(err) {
				t.Errorf("stale pod's record survived GC: %v", err)
			}
			if got := podLinks(t, keepNS); len(got["eth0"]) != 1 {
				t.Errorf("valid pod lost its links to GC: %v", got)
			}
			if _, err := os.Stat(filepath.Join(n.cniDir, keep.ContainerID)); err != nil {
				t.Errorf("valid pod's record is gone: %v", err)
			}
			// GC reached the delegate network with that network's own valid set.
			entries, err := debug.ReadCommandLog(cmdLog)
			if err != nil {
				t.Fatal(err)
			}
			var gcSeen bool
			for _, e := range entries {
				if e.Command != "GC" {
					continue
				}
				gcSeen = true
				var in struct {
					Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
				}
				_ = json.Unmarshal(e.CmdArgs.StdinData, &in)
				// The network's own attachments of the valid pod, and the
				// runtime's valid set as given; nothing of the stale pod.
				want := []types.GCAttachment{{ContainerID: keep.ContainerID, IfName: "eth0"}, {ContainerID: keep.ContainerID, IfName: "net1"}}
				if fmt.Sprint(in.Valid) != fmt.Sprint(want) {
					t.Errorf("noop's GC valid set = %+v, want %+v", in.Valid, want)
				}
			}
			if !gcSeen {
				t.Errorf("GC was not forwarded to the delegate network; command log: %+v", entries)
			}
		})
	}
}
