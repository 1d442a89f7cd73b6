package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/e2e/controlplane"
)

// runAPI counts the API requests per ADD and per DEL of noop pods of 1, 3
// and 8 networks, in thin and thick mode, and in thin mode with a runtime
// that passes no pod annotations.
func runAPI(b *bench, s settings, r *report) error {
	var all []*apiLoad
	var rows []string
	for _, run := range []struct {
		arm   string
		older bool
	}{{armManifold, false}, {armThick, false}, {armManifold, true}} {
		for _, n := range []int{1, 3, 8} {
			label := run.arm
			if run.older {
				label += "-older-runtime"
			}
			logf("API requests: %s, %d networks, %d ADDs and DELs", label, n, s.apiCalls)
			pod, err := b.createPod(fmt.Sprintf("api-%s-%d", label, n), kindNoop, n)
			if err != nil {
				return err
			}
			a, err := b.apiLoad(run.arm, pod, s.apiCalls, run.older)
			if err != nil {
				return fmt.Errorf("%s %d: %w", label, n, err)
			}
			arm := run.arm
			if run.older {
				arm += " (runtime passes no pod annotations)"
			}
			all = append(all, a)
			rows = append(rows, fmt.Sprintf("%s\t%d\t%d\t%s\t%s", arm, n, s.apiCalls, formatCounts(a.perAdd), formatCounts(a.perDel)))
		}
	}
	r.set("api_requests", all)
	w := r.out("api")
	fmt.Fprintf(w, "\nAPI requests per call (kube-apiserver apiserver_request_total, pods/NADs/events; etcd: the API server's etcd requests for them, etcd_requests_total)\n")
	table(w, false, "arm\tnets\tcalls\tper ADD\tper DEL", rows)
	return nil
}

// apiLoad is one pod shape's API requests per call, by "VERB
// resource[/subresource]", from kube-apiserver's apiserver_request_total,
// for the resources manifold touches (pods, NADs, events), and the API
// server's etcd requests for them by "etcd:operation resource"
// (etcd_requests_total); what the API server counted on other resources
// over the same windows (its own controllers, leases) is "background".
type apiLoad struct {
	obj
	perAdd, perDel map[string]float64
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
func (b *bench) apiLoad(arm string, pod *podSpec, calls int, olderRuntime bool) (*apiLoad, error) {
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
		if _, err := b.call(b.ctx, arm, "ADD", sb); err != nil {
			for _, done := range sbs[:i+1] {
				_, _ = b.call(b.ctx, arm, "DEL", done)
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
		if _, err := b.call(b.ctx, arm, "DEL", sb); err != nil {
			return nil, err
		}
	}
	m2, err := read()
	if err != nil {
		return nil, err
	}
	a := &apiLoad{}
	var bgAdd, bgDel map[string]float64
	a.perAdd, bgAdd = perCall(m0, m1, calls)
	a.perDel, bgDel = perCall(m1, m2, calls)
	a.obj = obj{{"arm", arm}, {"networks", pod.Networks}, {"calls", calls}, {"older_runtime", nonZero(olderRuntime)},
		{"per_add", a.perAdd}, {"per_del", a.perDel}, {"background_during_add", nonEmpty(bgAdd)}, {"background_during_del", nonEmpty(bgDel)}}
	return a, nil
}

// nonEmpty is m, or nil (left out) when it is empty.
func nonEmpty(m map[string]float64) any {
	if len(m) == 0 {
		return nil
	}
	return m
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
