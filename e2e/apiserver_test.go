package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/manifold-cni/manifold/e2e/controlplane"
)

// Scenario 9: the API server goes away after ADD. DEL, which needs only the
// scratch record, still removes everything; a new ADD fails with code 11
// (try again later) within a bound, and nothing is left attached. Once the
// server is back, the runtime's retry works. The same holds for a server that
// accepts connections but never answers (SIGSTOP).
func TestAPIServerDown(t *testing.T) {
	e := newEnv(t)
	sa := nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	conf := e.manifoldConf(nil)
	short := e.manifoldConf(map[string]any{"apiTimeout": shortAPITimeout.String()})
	wants := []want{
		e.clusterWant(),
		{name: e.ns + "/a", ifname: "net1", subnet: sa},
	}
	// Generous: the point is "bounded, no hang", not precise timing.
	bound := 3*shortAPITimeout + 5*time.Second

	// failFast runs ADD for a sandbox while the server is out, and checks the
	// code, the bound and that nothing was attached.
	failFast := func(e *env, box *sandbox) {
		e.t.Helper()
		start := time.Now()
		_, err := e.add(short, box)
		took := time.Since(start)
		wantCode(e.t, err, types.ErrTryAgainLater, box.k8s.Namespace+"/"+box.k8s.Name)
		if took > bound {
			e.t.Errorf("ADD with the API server out took %s, more than %s", took, bound)
		}
		e.t.Logf("ADD with the API server out failed in %s", took.Round(time.Millisecond))
		e.checkNothingLeft(box)
	}
	// retry runs ADD for box again once the server is back, and DEL.
	retry := func(e *env, box *sandbox) {
		e.t.Helper()
		e.mustAdd(conf, box)
		if got := sorted(keys(links(e.t, box.netns))); !slices.Equal(got, []string{"eth0", "net1"}) {
			e.t.Errorf("interfaces after the retried ADD = %v, want eth0 and net1", got)
		}
		e.mustDel(conf, box)
		e.checkNothingLeft(box)
	}

	t.Run("stopped", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "a"})
		box := e.sandboxFor(pod)
		res := e.mustAdd(conf, box)
		e.checkAttached(box, res, wants)

		if err := e.cp.StopAPIServer(); err != nil {
			t.Fatalf("stop kube-apiserver: %v", err)
		}
		restarted := false
		restart := func() {
			if restarted {
				return
			}
			restarted = true
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := e.cp.RestartAPIServer(ctx); err != nil {
				t.Fatalf("restart kube-apiserver: %v", err)
			}
		}
		// Later tests share this server: bring it back however this one ends.
		t.Cleanup(restart)

		e.mustDel(conf, box)
		e.checkNothingLeft(box)

		again := e.sandboxFor(pod)
		failFast(e, again)

		restart()
		retry(e, again)
	})

	t.Run("hung", func(t *testing.T) {
		e := e.sub(t)
		pod := e.pod(e.ns, map[string]string{annotNetworks: "a"})
		box := e.sandboxFor(pod)
		if err := e.cp.Pause(); err != nil {
			t.Fatalf("pause kube-apiserver: %v", err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := e.cp.Resume(); err != nil {
					t.Fatalf("resume kube-apiserver: %v", err)
				}
			}
		}
		t.Cleanup(resume)

		failFast(e, box)

		resume()
		retry(e, box)
	})
}

// Scenario 10: the network-status write leaves the pod's other annotations
// and labels alone, including those another client writes while ADD runs (a
// gate plugin holds the ADD open in between). A whole-object update would
// either lose them or fail on the changed resourceVersion.
func TestOtherAnnotationsSurvive(t *testing.T) {
	e := newEnv(t)
	sa := nextSubnet()
	dir := t.TempDir()
	reached, release := filepath.Join(dir, "reached"), filepath.Join(dir, "release")
	e.nad(e.ns, "gated", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gated","plugins":[%s,{"type":"gate","reached":%q,"release":%q}]}`,
		e.macvlanConf("", sa), reached, release))
	const cfgValue = `{"nested":{"json":true},"list":[1,2]}`
	pod := e.pod(e.ns, map[string]string{
		annotNetworks:        "gated",
		"example.com/owner":  "team-a",
		"example.com/config": cfgValue,
		"example.com/empty":  "",
	})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)

	type addResult struct {
		res types.Result
		err error
	}
	done := make(chan addResult, 1)
	go func() {
		res, err := e.add(conf, box)
		done <- addResult{res, err}
	}()
	// The release file ends the gate's wait whatever happens below.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o600) })

	waitFile(t, reached, done)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{"example.com/late": "written-during-add"},
		"labels":      map[string]string{"tier": "backend"},
	}})
	if _, err := e.k8s.CoreV1().Pods(pod.Namespace).Patch(e.ctx(), pod.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the pod during ADD: %v", err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var r addResult
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("ADD did not finish within 2 minutes of the gate's release")
	}
	if r.err != nil {
		t.Fatalf("ADD: %v", r.err)
	}
	res, err := types100.NewResultFromResult(r.res)
	if err != nil {
		t.Fatal(err)
	}
	e.checkAttached(box, res, []want{
		e.clusterWant(),
		{name: e.ns + "/gated", ifname: "net1", subnet: sa},
	})

	got := e.getPod(pod)
	wantAnn := map[string]string{
		annotNetworks:        "gated",
		"example.com/owner":  "team-a",
		"example.com/config": cfgValue,
		"example.com/empty":  "",
		"example.com/late":   "written-during-add",
	}
	for k, v := range wantAnn {
		if g, ok := got.Annotations[k]; !ok || g != v {
			t.Errorf("annotation %s = %q (present %v), want %q", k, g, ok, v)
		}
	}
	if len(got.Annotations) != len(wantAnn)+1 {
		t.Errorf("annotations = %v, want exactly %v plus %s", got.Annotations, wantAnn, annotNetworkStatus)
	}
	if got.Labels["tier"] != "backend" {
		t.Errorf("labels = %v, want tier=backend kept", got.Labels)
	}
	if got.Spec.NodeName != "e2e-node" || len(got.Spec.Containers) != 1 {
		t.Errorf("pod spec changed: %+v", got.Spec)
	}

	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// waitFile waits for a file to appear, failing early if ADD already ended.
func waitFile[T any](t *testing.T, path string, done chan T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case r := <-done:
			done <- r
			t.Fatalf("ADD ended before reaching the gate: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("ADD did not reach the gate (%s) within a minute", path)
}

// A NAD changed just before the pod was created is attached in its new form:
// manifold reads NADs consistently, from etcd, never from the API server's
// watch cache, which could be older than the change or make the read wait for
// it (k8sclient.GetNAD). The ADD makes one GET of the NAD, and the API server
// one etcd read for it.
func TestNADChangedBeforePod(t *testing.T) {
	e := newEnv(t)
	oldNet, newNet := nextSubnet(), nextSubnet()
	e.nad(e.ns, "changed", e.macvlanConf("", oldNet))
	e.setNADConfig(e.ns, "changed", e.macvlanConf("", newNet))
	pod := e.pod(e.ns, map[string]string{annotNetworks: "changed"})
	box := e.sandboxFor(pod)
	conf := e.manifoldConf(nil)

	nadReads := func() (etcd, api float64) {
		text, err := e.cp.Metrics(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		etcd = controlplane.SumMetric(text, "etcd_requests_total", map[string]string{"resource": controlplane.NADResource.Resource, "operation": "get"})
		api = controlplane.SumMetric(text, "apiserver_request_total", map[string]string{"resource": controlplane.NADResource.Resource, "verb": "GET"})
		return etcd, api
	}
	etcd0, api0 := nadReads()
	res := e.mustAdd(conf, box)
	etcd1, api1 := nadReads()
	e.checkAttached(box, res, []want{e.clusterWant(), {name: e.ns + "/changed", ifname: "net1", subnet: newNet}})
	if api1-api0 != 1 {
		t.Errorf("NAD GETs during ADD: %v, want 1", api1-api0)
	}
	if etcd1-etcd0 != 1 {
		t.Errorf("etcd NAD reads during ADD: %v, want 1 (a consistent read)", etcd1-etcd0)
	}
	e.mustDel(conf, box)
	e.checkNothingLeft(box)
}

// With a runtime that passes the pod's annotations (containerd, CRI-O), ADD
// reads no pod from the API server: the networks come from the annotations as
// the kubelet gave them. With one that does not, ADD reads the pod once. Both
// write the same status.
func TestRuntimePodAnnotationsSkipPodRead(t *testing.T) {
	e := newEnv(t)
	sa, sb := nextSubnet(), nextSubnet()
	e.nad(e.ns, "a", e.macvlanConf("", sa))
	e.nad(e.ns, "b", e.macvlanConf("", sb))
	conf := e.manifoldConf(nil)
	podReads := func() float64 {
		text, err := e.cp.Metrics(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		return controlplane.SumMetric(text, "apiserver_request_total", map[string]string{"resource": "pods", "subresource": "", "verb": "GET"})
	}
	for _, tc := range []struct {
		name  string
		older bool
		reads float64
	}{
		{name: "annotations from the runtime", reads: 0},
		{name: "older runtime", older: true, reads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := e.pod(e.ns, map[string]string{annotNetworks: "a, b"})
			box := e.sandboxFor(pod)
			if tc.older {
				box.olderRuntime()
			}
			before := podReads()
			res := e.mustAdd(conf, box)
			if got := podReads() - before; got != tc.reads {
				t.Errorf("pod GETs during ADD: %v, want %v", got, tc.reads)
			}
			e.checkAttached(box, res, []want{e.clusterWant(),
				{name: e.ns + "/a", ifname: "net1", subnet: sa}, {name: e.ns + "/b", ifname: "net2", subnet: sb}})
			e.mustDel(conf, box)
			e.checkNothingLeft(box)
		})
	}
}
