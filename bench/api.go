package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/e2e/controlplane"
)

// apiResult is the API load of one pod shape, per call.
type apiResult struct {
	// Arm is manifold (thin) or thick (shim and daemon).
	Arm      string `json:"arm"`
	Networks int    `json:"networks"`
	Calls    int    `json:"calls"`
	// OlderRuntime: the runtime did not pass the pod's annotations.
	OlderRuntime bool `json:"older_runtime,omitempty"`
	// PerAdd and PerDel count requests per call by "VERB resource[/subresource]",
	// from kube-apiserver's apiserver_request_total, for the resources manifold
	// touches (pods, NADs, events), and the API server's etcd requests for
	// them by "etcd:operation resource" (etcd_requests_total).
	PerAdd map[string]float64 `json:"per_add"`
	PerDel map[string]float64 `json:"per_del"`
	// Background is what the API server counted on other resources over the
	// same windows (its own controllers, leases): not manifold's.
	BackgroundAdd map[string]float64 `json:"background_during_add,omitempty"`
	BackgroundDel map[string]float64 `json:"background_during_del,omitempty"`
}

// manifoldResources are the resources manifold may touch.
var manifoldResources = map[string]bool{"pods": true, "network-attachment-definitions": true, "events": true}

// requestCounts counts apiserver_request_total in a /metrics text, summed
// over response codes and everything else, by verb, resource and subresource
// ("GET pods"). It adds the API server's own requests to etcd from
// etcd_requests_total, by operation and resource ("etcd:get pods"): a read
// served from the watch cache makes none. Samples with no resource (/metrics,
// /openapi, /healthz) are not API objects and are left out.
func requestCounts(text string) map[string]float64 {
	out := map[string]float64{}
	for labels, v := range controlplane.Samples(text, "apiserver_request_total") {
		if labels["resource"] == "" {
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	for labels, v := range controlplane.Samples(text, "etcd_requests_total") {
		if labels["resource"] != "" {
			out["etcd:"+labels["operation"]+" "+labels["resource"]] += v
		}
	}
	return out
}

// perCall splits after-before by resource into manifold's and the rest, per call.
func perCall(before, after map[string]float64, calls int) (mine, other map[string]float64) {
	mine, other = map[string]float64{}, map[string]float64{}
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		res := k[strings.IndexByte(k, ' ')+1:]
		res, _, _ = strings.Cut(res, "/")
		if manifoldResources[res] {
			mine[k] = math.Round(d/float64(calls)*100) / 100
		} else {
			other[k] = d
		}
	}
	return mine, other
}

// apiLoad runs calls ADDs and then calls DELs of a pod shape through manifold,
// reading the API server's request counters before, between and after. The
// benchmark makes no API request of its own inside those windows (the pods
// already exist; the metrics reads are non-resource requests, which are not
// counted against any resource and are left out).
//
// The thick arm's daemon writes the status just after it answers, so for that
// arm the counters are read again until they settle before the DEL window.
func (b *bench) apiLoad(arm string, pod *podSpec, calls int, olderRuntime bool) (*apiResult, error) {
	netns, err := b.newNetNS()
	if err != nil {
		return nil, err
	}
	var sbs []*sandbox
	for i := 0; i < calls; i++ {
		sb := b.newSandbox(pod, netns.Path())
		sb.OlderRuntime = olderRuntime
		sbs = append(sbs, sb)
	}
	read := func() (map[string]float64, error) {
		text, err := b.cp.Metrics(b.ctx)
		if err != nil {
			return nil, err
		}
		return requestCounts(text), nil
	}
	m0, err := read()
	if err != nil {
		return nil, err
	}
	for i, sb := range sbs {
		if _, err := b.add(b.ctx, arm, sb); err != nil {
			for _, done := range sbs[:i+1] {
				_, _ = b.del(b.ctx, arm, done)
			}
			return nil, err
		}
	}
	m1, err := read()
	if err != nil {
		return nil, err
	}
	for settled := 0; arm == armThick && settled < 3; {
		time.Sleep(100 * time.Millisecond)
		m, err := read()
		if err != nil {
			return nil, err
		}
		if mine, _ := perCall(m1, m, 1); len(mine) == 0 {
			settled++
		} else {
			settled = 0
		}
		m1 = m
	}
	for _, sb := range sbs {
		if _, err := b.del(b.ctx, arm, sb); err != nil {
			return nil, err
		}
	}
	m2, err := read()
	if err != nil {
		return nil, err
	}
	r := &apiResult{Arm: arm, Networks: pod.Networks, Calls: calls, OlderRuntime: olderRuntime}
	r.PerAdd, r.BackgroundAdd = perCall(m0, m1, calls)
	r.PerDel, r.BackgroundDel = perCall(m1, m2, calls)
	return r, nil
}

// formatCounts renders per-call counts in a stable order.
func formatCounts(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %g", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
