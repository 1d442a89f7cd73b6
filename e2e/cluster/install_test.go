package cluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/e2e/crinode"
)

// TestInstall installs manifold as docs/install.md says, with kubectl and
// the DaemonSets of deployments/ (only the image and --api-server set), in
// thin and then thick mode: the node's CNI becomes manifold, a pod gets its
// networks, its network-status and its events, and its deletion leaves
// nothing; uninstalling gives the node back to its primary CNI.
func TestInstall(t *testing.T) {
	for _, mode := range []cluster.Mode{cluster.Thin, cluster.Thick} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newTenv(t)
			e.install(mode, imageV1)
			e.wantNodeCNI(cluster.ManifoldNetwork)
			p, err := e.createPod("app-")
			if err != nil {
				t.Fatal(err)
			}
			running := e.podsRunning([]*corev1.Pod{p})[0]
			st, err := cluster.NetworkStatus(e.fresh(running))
			if err != nil || len(st) != wantNetStatus {
				t.Fatalf("network-status %+v (%v), want %d entries", st, err, wantNetStatus)
			}
			t.Logf("network-status: %+v", st)
			if st[0].Name != cluster.PrimaryNetwork || !st[0].Default || st[1].Name != e.ns+"/blue" || st[2].Name != e.ns+"/green" {
				t.Errorf("network-status names %s, %s, %s (default %v); want %s (default), %s/blue, %s/green",
					st[0].Name, st[1].Name, st[2].Name, st[0].Default, cluster.PrimaryNetwork, e.ns, e.ns)
			}
			if running.Status.PodIP != firstIP(st[0].IPs) {
				t.Errorf("status.podIP %s, want eth0's %v", running.Status.PodIP, st[0].IPs)
			}
			e.wantEvents(running, "AddedInterface", 3)
			if err := e.c.DeleteAndWait(e.ctx(), podWait, running); err != nil {
				t.Fatal(err)
			}
			e.waitNoLeftovers()
			e.uninstall(mode)
			if _, err := os.Stat(cluster.ManifoldConfig); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("manifold's config is still there after its DaemonSet was deleted (%v)", err)
			}
			e.wantNodeCNI(cluster.PrimaryNetwork)
		})
	}
}

// install installs manifold in mode from image, with the installer's own
// flags and installerArgs, and waits for its config and for the node to be
// Ready. The primary CNI's config is written after the DaemonSet, as a
// cluster's network plugin starts beside it: the installer waits for it.
func (e *tenv) install(mode cluster.Mode, image string, installerArgs ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := e.c.Install(ctx, mode, image, installerArgs...); err != nil {
		e.t.Fatalf("%v\n%s", err, e.installerLogs(mode))
	}
	if err := ensurePrimary(); err != nil {
		e.t.Fatal(err)
	}
	e.waitConfig(mode)
	e.waitReady(true)
	e.t.Logf("%s mode installed with kubectl in %s", mode, time.Since(start).Round(time.Millisecond))
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.t.Logf("installer and daemon logs, from every pod of this test:\n%s\n%s", e.installerLogs(cluster.Thin), e.installerLogs(cluster.Thick))
		}
	})
}

// ensurePrimary writes the primary CNI's config when it is not there.
func ensurePrimary() error {
	if _, err := os.Stat(filepath.Join(cluster.ConfDir, cluster.PrimaryFile)); err == nil {
		return nil
	}
	return cluster.WritePrimary(cluster.PrimaryFile, cluster.PrimaryConfig())
}

// waitConfig waits until manifold's config on the host runs mode's plugin.
func (e *tenv) waitConfig(mode cluster.Mode) {
	e.t.Helper()
	want := `"type":"manifold"`
	if mode.Thick {
		want = `"type":"manifold-shim"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(cluster.ManifoldConfig)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), " ", ""), want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("manifold's config does not run %s after 2m (%q, %v)\n%s", want, b, err, e.installerLogs(mode))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// uninstall deletes the DaemonSet as docs/install.md says.
func (e *tenv) uninstall(mode cluster.Mode) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), 3*time.Minute)
	defer cancel()
	if err := e.c.Uninstall(ctx, mode); err != nil {
		e.t.Fatal(err)
	}
}

// waitReady waits for the node's Ready condition to be want, and returns its
// message.
func (e *tenv) waitReady(want bool) string {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, msg, err := e.c.NodeReady(e.ctx())
		if err == nil && ready == want {
			return msg
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node Ready is %v (%q, %v) after 2m, want %v", ready, msg, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wantNodeCNI waits until the runtime's loaded CNI network is name.
func (e *tenv) wantNodeCNI(name string) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []crinode.CNINetwork
	for {
		nets, err := e.c.Node.LoadedCNI(e.ctx())
		if err == nil && len(nets) == 1 && nets[0].Name == name {
			return
		}
		last = nets
		if time.Now().After(deadline) {
			e.t.Fatalf("%s's CNI config is %+v (%v) after a minute, want the network %s", e.c.Node.Kind(), last, err, name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantEvents waits for n events of the reason on the pod.
func (e *tenv) wantEvents(p *corev1.Pod, reason string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(reportWait)
	for {
		var got []string
		for _, ev := range e.c.Events(e.ctx(), p) {
			if ev.Reason == reason {
				got = append(got, ev.Message)
			}
		}
		if len(got) == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("pod %s has %d %s events %v, want %d", p.Name, len(got), reason, got, n)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *tenv) fresh(p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	got, err := e.c.Clientset().CoreV1().Pods(p.Namespace).Get(e.ctx(), p.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// installerLogs are the logs of the DaemonSet's containers, for a failure
// report.
func (e *tenv) installerLogs(mode cluster.Mode) string {
	return e.logs.Logs(mode.DaemonSet, 6000)
}

func firstIP(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return ips[0]
}
