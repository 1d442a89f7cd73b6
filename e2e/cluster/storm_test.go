package cluster_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// stormPods is the pod storm's size: the kubelet's default maxPods is 110,
// and the DaemonSet's pod takes one.
const stormPods = 100

// TestPodStorm creates 100 pods at once on the node in thick mode (the case
// that OOM-kills Multus's thick daemon, multus-cni#1346). All of them run
// with all their networks, and the daemon container's memory, read from its
// cgroup, peaks under its limit.
func TestPodStorm(t *testing.T) {
	e := newTenv(t)
	e.install(cluster.Thick, imageV1)
	cg, err := cluster.DaemonMemoryCgroup()
	if err != nil {
		t.Fatal(err)
	}
	limit, _ := cluster.CgroupValue(cg, "memory.limit_in_bytes")
	if err := os.WriteFile(filepath.Join(cg, "memory.max_usage_in_bytes"), []byte("0"), 0o644); err != nil {
		t.Logf("reset the daemon's peak: %v", err)
	}
	start := time.Now()
	pods := e.storm(stormPods)
	took := time.Since(start)
	// A daemon killed for memory (or anything else) would show as a
	// restart, and its cgroup would be a new one.
	for _, s := range e.daemonSetPod(cluster.Thick).Status.ContainerStatuses {
		if s.RestartCount > 0 {
			t.Errorf("the DaemonSet's %s container restarted %d times during the storm (last: %+v)", s.Name, s.RestartCount, s.LastTerminationState.Terminated)
		}
	}
	peak, err := cluster.CgroupValue(cg, "memory.max_usage_in_bytes")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("storm: %d pods running with all their networks %s after they were created; the daemon container's memory peaked at %.1f MiB (limit %.0f MiB)",
		len(pods), took.Round(time.Millisecond), float64(peak)/(1<<20), float64(limit)/(1<<20))
	if limit <= 0 || limit >= 1<<50 {
		t.Errorf("the daemon container has no memory limit in its cgroup %s (%d): the DaemonSet sets one", cg, limit)
	} else if peak >= limit {
		t.Errorf("the daemon's memory peaked at its limit: %d of %d bytes", peak, limit)
	}
	if err := e.c.DeleteAndWait(e.ctx(), podWait, pods...); err != nil {
		t.Fatal(err)
	}
	e.uninstall(cluster.Thick)
	e.waitNoLeftovers()
}

// storm creates n pods at once and waits for all of them to run with their
// networks.
func (e *tenv) storm(n int) []*corev1.Pod {
	e.t.Helper()
	pods := make([]*corev1.Pod, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = e.createPod("storm-")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return e.podsRunning(pods)
}
