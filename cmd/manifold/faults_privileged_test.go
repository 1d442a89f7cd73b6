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
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// startManifold starts the binary once the way a runtime does, so the test can
// kill it mid-call; stdout is collected in the returned buffer.
func startManifold(t *testing.T, n *node, cmd string, conf []byte, pod *testenv.Pod) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	c := exec.Command(filepath.Join(n.rt.BinDir, "manifold"))
	var args []string
	for _, kv := range pod.Args {
		args = append(args, kv[0]+"="+kv[1])
	}
	c.Env = append(os.Environ(),
		"CNI_COMMAND="+cmd, "CNI_CONTAINERID="+pod.ContainerID, "CNI_NETNS="+pod.NetNS,
		"CNI_IFNAME=eth0", "CNI_PATH="+n.rt.BinDir, "CNI_ARGS="+strings.Join(args, ";"))
	c.Stdin = bytes.NewReader(conf)
	out := &bytes.Buffer{}
	c.Stdout = out
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c, out
}

// singlePlugin is manifold's config as a single .conf (not a conflist), which is
// what a runtime hands a plugin once it has flattened the list.
func singlePlugin(t *testing.T, conflist []byte) []byte {
	t.Helper()
	var l struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &l); err != nil {
		t.Fatal(err)
	}
	p := l.Plugins[0]
	p["cniVersion"], p["name"] = l.CNIVersion, l.Name
	b, _ := json.Marshal(p)
	return b
}

// gated wraps a delegate's single config into a conflist that ends with the gate
// plugin, so the delegate's real plugin finishes and then the ADD hangs.
func gated(conf, reached, release string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	list := map[string]any{"cniVersion": m["cniVersion"], "name": m["name"],
		"plugins": []any{m, map[string]any{"type": "gate", "reached": reached, "release": release}}}
	b, _ := json.Marshal(list)
	return string(b)
}

// assertClean checks that nothing of a pod is left on the node.
func assertClean(t *testing.T, n *node, what string) {
	t.Helper()
	if got := testenv.BridgePorts(t, n.bridge); len(got) != 0 {
		t.Errorf("%s: bridge ports left: %v", what, got)
	}
	if got := leases(t, n.leaseDir); len(got) != 0 {
		t.Errorf("%s: host-local leases left: %v", what, got)
	}
	if got := recordFiles(t, n.cniDir); len(got) != 0 {
		t.Errorf("%s: files left in cniDir: %v", what, got)
	}
}

// TestCrashDuringAdd kills manifold with SIGKILL while delegate k (0, 1, 2) is
// half done: its real plugin has attached, libcni has not cached the result yet.
// A later DEL, or a GC that does not list the container, must remove it all.
func TestCrashDuringAdd(t *testing.T) {
	for _, cleanup := range []string{"DEL", "GC"} {
		for k := 0; k < 3; k++ {
			t.Run(fmt.Sprintf("%s after %d finished", cleanup, k), func(t *testing.T) {
				n := newNode(t)
				parent := testenv.VethParent(t)
				dir := t.TempDir()
				reached, release := filepath.Join(dir, "reached"), filepath.Join(dir, "release")
				delegates := []string{
					n.bridgeConf("1.1.0", "10.211.1.0/24"),
					n.macvlanConf("1.1.0", parent, "10.211.2.0/24"),
					strings.Replace(n.macvlanConf("1.1.0", parent, "10.211.3.0/24"), `"mv-net"`, `"mv-net2"`, 1),
				}
				delegates[k] = gated(delegates[k], reached, release)
				conflist := n.manifoldConf(t, "1.1.0", nil, delegates...)
				pod, netns := newPod(t)

				cmd, _ := startManifold(t, n, "ADD", singlePlugin(t, conflist), pod)
				waitFile(t, reached, 30*time.Second)
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait()
				if got := len(podLinks(t, netns)); got != k+1 {
					t.Fatalf("links in the pod at the crash = %d, want %d", got, k+1)
				}

				list := testenv.Conf(t, conflist)
				switch cleanup {
				case "DEL":
					if err := n.rt.Del(context.Background(), list, pod); err != nil {
						t.Fatalf("DEL after crash: %v", err)
					}
				case "GC":
					gc := exec.Command(filepath.Join(n.rt.BinDir, "manifold"))
					gc.Env = append(os.Environ(), "CNI_COMMAND=GC", "CNI_PATH="+n.rt.BinDir)
					var m map[string]any
					_ = json.Unmarshal(singlePlugin(t, conflist), &m)
					m["cni.dev/valid-attachments"] = []any{}
					b, _ := json.Marshal(m)
					gc.Stdin = bytes.NewReader(b)
					if out, err := gc.CombinedOutput(); err != nil {
						t.Fatalf("GC after crash: %v: %s", err, out)
					}
				}
				if got := podLinks(t, netns); len(got) != 0 {
					t.Errorf("pod links after %s = %v", cleanup, got)
				}
				assertClean(t, n, cleanup)
			})
		}
	}
}

func waitFile(t *testing.T, path string, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within %s", path, bound)
}

// TestTornRecord damages the record after a good ADD; DEL must still remove
// every attachment (from libcni's cache).
func TestTornRecord(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"garbage":   func([]byte) []byte { return []byte("\x00not json at all") },
		"empty":     func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			parent := testenv.VethParent(t)
			ctx := context.Background()
			list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
				n.bridgeConf("1.0.0", "10.212.1.0/24"),
				n.macvlanConf("1.0.0", parent, "10.212.2.0/24"),
				ptpConf("1.0.0", "10.212.3.7/24")))
			pod, netns := newPod(t)
			if _, err := n.rt.Add(ctx, list, pod); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(n.cniDir, pod.ContainerID)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no record after ADD: %v", err)
			}
			if err := os.WriteFile(path, damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := n.rt.Del(ctx, list, pod); err != nil {
				t.Fatalf("DEL with a %s record: %v", name, err)
			}
			if got := podLinks(t, netns); len(got) != 0 {
				t.Errorf("pod links after DEL = %v", got)
			}
			assertClean(t, n, "DEL")
		})
	}
}

// TestConcurrentPods runs 50 pods with 3 networks each, ADD and DEL, all at once.
func TestConcurrentPods(t *testing.T) {
	n := newNode(t)
	parent := testenv.VethParent(t)
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.213.0.0/16"),
		n.macvlanConf("1.0.0", parent, "10.214.0.0/16"),
		strings.Replace(n.macvlanConf("1.0.0", parent, "10.215.0.0/16"), `"mv-net"`, `"mv-net2"`, 1)))
	concurrentPods(t, n, list, 50, 3)
	assertClean(t, n, "after 50 concurrent pods")
}

// concurrentPods runs ADD, a link count and DEL for pods pods at once.
func concurrentPods(t *testing.T, n *node, list *libcni.NetworkConfigList, pods, links int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 2*pods)
	for range pods {
		pod, netns := newPod(t)
		wg.Go(func() {
			if _, err := n.rt.Add(ctx, list, pod); err != nil {
				errs <- fmt.Errorf("ADD %s: %w", pod.ContainerID, err)
				return
			}
			if got := countLinks(netns); got != links {
				errs <- fmt.Errorf("pod %s has %d links after ADD, want %d", pod.ContainerID, got, links)
			}
			if err := n.rt.Del(ctx, list, pod); err != nil {
				errs <- fmt.Errorf("DEL %s: %w", pod.ContainerID, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAddDelRace runs ADD and DEL on the same container at once, many times. The
// lock serialises them: either DEL ran first (the pod ends attached, with its
// record) or ADD did (nothing is left). Never a mix.
func TestAddDelRace(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil,
		n.bridgeConf("1.0.0", "10.216.1.0/24"),
		ptpConf("1.0.0", "10.216.3.7/24")))
	for i := 0; i < 10; i++ {
		pod, netns := newPod(t)
		var wg sync.WaitGroup
		wg.Add(2)
		var addErr, delErr error
		go func() { defer wg.Done(); _, addErr = n.rt.Add(ctx, list, pod) }()
		go func() { defer wg.Done(); delErr = n.rt.Del(ctx, list, pod) }()
		wg.Wait()
		if addErr != nil || delErr != nil {
			t.Fatalf("round %d: ADD %v, DEL %v", i, addErr, delErr)
		}
		links := countLinks(netns)
		_, recErr := os.Stat(filepath.Join(n.cniDir, pod.ContainerID))
		if attached := recErr == nil; (links == 2) != attached || (links != 0 && links != 2) {
			t.Fatalf("round %d: %d links with record=%v: a mix of states", i, links, attached)
		}
		if err := n.rt.Del(ctx, list, pod); err != nil {
			t.Fatal(err)
		}
		if got := countLinks(netns); got != 0 {
			t.Fatalf("round %d: %d links after the final DEL", i, got)
		}
	}
	assertClean(t, n, "after the races")
}

// TestDelegateFaults covers delegates that fail on DEL, print garbage, or are
// missing from binDir.
func TestDelegateFaults(t *testing.T) {
	t.Run("fails on DEL", func(t *testing.T) {
		for _, retry := range []bool{false, true} {
			t.Run(fmt.Sprintf("retryDeleteOnError=%v", retry), func(t *testing.T) {
				n := newNode(t)
				ctx := context.Background()
				dbgPath := filepath.Join(t.TempDir(), "dbg.json")
				ok := &debug.Debug{ReportResult: `{"cniVersion":"1.0.0"}`}
				if err := ok.WriteDebug(dbgPath); err != nil {
					t.Fatal(err)
				}
				noop := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"noop-net","type":"noop","debugFile":%q}`, dbgPath)
				list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", map[string]any{"retryDeleteOnError": retry},
					n.bridgeConf("1.0.0", "10.217.1.0/24"), noop, ptpConf("1.0.0", "10.217.3.7/24")))
				pod, netns := newPod(t)
				if _, err := n.rt.Add(ctx, list, pod); err != nil {
					t.Fatal(err)
				}
				broken := &debug.Debug{ReportError: "noop refuses to delete", ReportErrorCode: 11}
				if err := broken.WriteDebug(dbgPath); err != nil {
					t.Fatal(err)
				}
				err := n.rt.Del(ctx, list, pod)
				var te *types.Error
				if !errors.As(err, &te) || !strings.Contains(te.Msg, "noop refuses to delete") || !strings.Contains(te.Msg, "net1") {
					t.Fatalf("DEL error = %v, want the noop failure naming net1", err)
				}
				// noop's net1 never was a link; eth0 and net2 must be gone.
				if got := podLinks(t, netns); len(got) != 0 {
					t.Errorf("links after a partly failed DEL = %v, want none", got)
				}
				if got := leases(t, n.leaseDir); len(got) != 0 {
					t.Errorf("leases after a partly failed DEL = %v", got)
				}
				_, recErr := os.Stat(filepath.Join(n.cniDir, pod.ContainerID))
				if kept := recErr == nil; kept != retry {
					t.Errorf("record kept = %v, want %v", kept, retry)
				}
				// The runtime retries once the delegate works again; then all is clean.
				if err := ok.WriteDebug(dbgPath); err != nil {
					t.Fatal(err)
				}
				if err := n.rt.Del(ctx, list, pod); err != nil {
					t.Fatalf("retried DEL: %v", err)
				}
				assertClean(t, n, "retried DEL")
			})
		}
	})
	t.Run("prints garbage", func(t *testing.T) {
		n := newNode(t)
		dbgPath := filepath.Join(t.TempDir(), "dbg.json")
		if err := (&debug.Debug{ReportResult: `{"cniVersion": garbage`}).WriteDebug(dbgPath); err != nil {
			t.Fatal(err)
		}
		noop := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"noop-net","type":"noop","debugFile":%q}`, dbgPath)
		list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil, n.bridgeConf("1.0.0", "10.218.1.0/24"), noop))
		pod, netns := newPod(t)
		_, err := n.rt.Add(context.Background(), list, pod)
		if err == nil || !strings.Contains(err.Error(), "net1") {
			t.Fatalf("ADD = %v, want an error naming net1", err)
		}
		if got := podLinks(t, netns); len(got) != 0 {
			t.Errorf("links after failed ADD = %v", got)
		}
		assertClean(t, n, "failed ADD")
	})
	t.Run("missing binary", func(t *testing.T) {
		n := newNode(t)
		missing := `{"cniVersion":"1.0.0","name":"ghost-net","type":"no-such-plugin"}`
		list := testenv.Conf(t, n.manifoldConf(t, "1.0.0", nil, n.bridgeConf("1.0.0", "10.219.1.0/24"), missing))
		pod, netns := newPod(t)
		_, err := n.rt.Add(context.Background(), list, pod)
		if err == nil || !strings.Contains(err.Error(), "no-such-plugin") || !strings.Contains(err.Error(), "ghost-net") {
			t.Fatalf("ADD = %v, want an error naming the plugin and the network", err)
		}
		if got := podLinks(t, netns); len(got) != 0 {
			t.Errorf("links after failed ADD = %v", got)
		}
		assertClean(t, n, "failed ADD")
	})
}

// countLinks counts the non-loopback links in a netns; -1 if it cannot look. It
// does not fail the test, so goroutines may call it.
func countLinks(netns ns.NetNS) int {
	n := -1
	_ = netns.Do(func(ns.NetNS) error {
		links, err := testenv.LinkList()
		if err != nil {
			return err
		}
		n = 0
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				n++
			}
		}
		return nil
	})
	return n
}
