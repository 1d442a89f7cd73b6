package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// TestRestartFailsClosed: while pods are being created, the DaemonSet's pod
// is deleted (SIGTERM: its DaemonSet makes a new one) and then killed
// (SIGKILL: the kubelet restarts its containers). manifold's config stays in
// place throughout, and no pod runs with the default network alone. Then the
// node reboots with pods on it: each comes back with all its networks, and
// the dead sandboxes' addresses and files are released.
func TestRestartFailsClosed(t *testing.T) {
	for _, mode := range []cluster.Mode{cluster.Thin, cluster.Thick} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newTenv(t)
			e.install(mode, imageV1)
			guard := guardConfig()
			ch := startChurn(e, 3)
			ch.waitRan(2)

			ch.step("the DaemonSet pod's deletion", 1, func() {
				old := e.daemonSetPod(mode)
				out, err := e.c.Kubectl(e.ctx(), "", "-n", "kube-system", "delete", "pod", old.Name, "--wait=false")
				if err != nil {
					t.Fatalf("kubectl delete pod: %v: %s", err, out)
				}
				e.waitReplaced(mode, old)
			})
			ch.waitRan(3)

			ch.step("the SIGKILL of its processes", 1, func() {
				pod := e.daemonSetPod(mode)
				killed := e.killInstallerProcesses(mode)
				t.Logf("SIGKILLed %v", killed)
				e.waitRestarted(mode, pod)
			})
			ch.waitRan(3)

			ch.stop()
			samples, bad := guard.finish()
			if len(bad) > 0 {
				t.Errorf("manifold's config went wrong during the restarts (%d samples):\n  %s", samples, strings.Join(bad, "\n  "))
			}
			e.reboot()
			e.uninstall(mode)
			e.waitNoLeftovers()
		})
	}
}

// heldKinds are the kinds of leftovers the reboot must see before it and
// see go after it: every running sandbox has leases, a record and libcni
// cache entries. (No pod here has a device, so no Device Info file is
// checked.)
var heldKinds = []string{cluster.HeldLease, cluster.HeldRecord, cluster.HeldManifoldCache, cluster.HeldRuntimeCache}

// reboot runs pods, reboots the node under them, and checks that each comes
// back with a new sandbox that has all its networks; that each kind of
// leftover of the dead sandboxes (heldKinds), seen before the reboot, is
// gone; then deletes them.
func (e *tenv) reboot() {
	e.t.Helper()
	var pods []*corev1.Pod
	for range 4 {
		p, err := e.createPod("reboot-")
		if err != nil {
			e.t.Fatal(err)
		}
		pods = append(pods, p)
	}
	pods = e.podsRunning(pods)
	before := map[string]string{}
	dead := map[string]bool{} // the sandboxes the reboot kills
	for _, p := range pods {
		id, _, err := e.c.Sandbox(e.ctx(), p)
		if err != nil {
			e.t.Fatal(err)
		}
		before[p.Name] = id
		dead[id] = true
	}
	// The check after the reboot must be able to see what it looks for.
	held := e.c.HeldKinds(dead)
	for _, kind := range heldKinds {
		if len(held[kind]) == 0 {
			e.t.Fatalf("before the reboot, the node holds no %s of the running sandboxes %v: the check after it could not fail; it holds %v", kind, dead, held)
		}
	}
	e.t.Logf("before the reboot, the running sandboxes hold %d leases, %d records, %d of manifold's and %d of the runtime's libcni cache entries",
		len(held[cluster.HeldLease]), len(held[cluster.HeldRecord]), len(held[cluster.HeldManifoldCache]), len(held[cluster.HeldRuntimeCache]))
	ctx, cancel := context.WithTimeout(e.ctx(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := e.c.Reboot(ctx); err != nil {
		e.t.Fatalf("reboot: %v", err)
	}
	for _, p := range pods {
		deadline := time.Now().Add(podWait)
		for {
			id, _, err := e.c.Sandbox(e.ctx(), p)
			if err == nil && id != before[p.Name] {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("pod %s has no new sandbox %s after the reboot (%v); events: %v", p.Name, podWait, err, e.c.EventMessages(e.ctx(), p))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := e.checkNetworks(p); err != nil {
			e.t.Error(err)
		}
	}
	e.t.Logf("reboot: %d pods back with all their networks %s after the node's restart", len(pods), time.Since(start).Round(time.Millisecond))
	// The dead sandboxes are released (the kubelet stops each before it
	// makes the new one), while their pods still run: a leak seen here is
	// the reboot's, not the deletion's.
	deadline := time.Now().Add(time.Minute)
	for held := e.c.HeldBy(dead); len(held) > 0; held = e.c.HeldBy(dead) {
		if time.Now().After(deadline) {
			e.t.Errorf("a minute after the pods came back from the reboot, the node still holds of their dead sandboxes:\n  %s", strings.Join(held, "\n  "))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := e.c.DeleteAndWait(e.ctx(), podWait, pods...); err != nil {
		e.t.Fatal(err)
	}
}

// daemonSetPod is mode's DaemonSet pod on the node, once there is exactly one
// and it runs.
func (e *tenv) daemonSetPod(mode cluster.Mode) *corev1.Pod {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := e.c.Clientset().CoreV1().Pods("kube-system").List(e.ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + mode.DaemonSet})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning && pods.Items[0].DeletionTimestamp == nil {
			return &pods.Items[0]
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s has no one running pod after 2m (%v)", mode.DaemonSet, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReplaced waits until the DaemonSet's pod is another than old, and
// running with every container ready.
func (e *tenv) waitReplaced(mode cluster.Mode, old *corev1.Pod) {
	e.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p := e.daemonSetPod(mode)
		if p.UID != old.UID && allReady(p) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s's pod %s was not replaced within 3m", mode.DaemonSet, old.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitRestarted waits until every container of the pod has restarted once
// more than in before and is ready again.
func (e *tenv) waitRestarted(mode cluster.Mode, before *corev1.Pod) {
	e.t.Helper()
	restarts := func(p *corev1.Pod) map[string]int32 {
		out := map[string]int32{}
		for _, s := range p.Status.ContainerStatuses {
			out[s.Name] = s.RestartCount
		}
		return out
	}
	was := restarts(before)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p := e.daemonSetPod(mode)
		now := restarts(p)
		done := allReady(p)
		for name, n := range was {
			done = done && now[name] > n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s's containers did not restart within 3m: restarts %v, were %v", mode.DaemonSet, now, was)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func allReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if !s.Ready {
			return false
		}
	}
	return true
}

// killInstallerProcesses SIGKILLs the DaemonSet's processes on the node: the
// installer, and in thick mode the node daemon.
func (e *tenv) killInstallerProcesses(mode cluster.Mode) []string {
	e.t.Helper()
	marks := []string{cluster.InstallerMark}
	if mode.Thick {
		marks = append(marks, cluster.DaemonMark)
	}
	var killed []string
	for _, m := range marks {
		for _, p := range cluster.Processes(m) {
			if err := syscall.Kill(p.PID, syscall.SIGKILL); err == nil {
				killed = append(killed, fmt.Sprintf("%d %s", p.PID, strings.ReplaceAll(p.Cmdline, "\x00", " ")))
			}
		}
	}
	if len(killed) != len(marks) {
		e.t.Fatalf("killed %v; want one process for each of %q", killed, marks)
	}
	return killed
}
