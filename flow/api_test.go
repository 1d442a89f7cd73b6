package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

func parseTestConf(t *testing.T, extra map[string]any) *netconf.Config {
	t.Helper()
	conf, err := netconf.ParseConfig(testConf(t, extra))
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func TestStaticNADKeys(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conf  map[string]any
		podNS string
		want  []string
	}{
		{name: "inline delegates", conf: nil, podNS: "default", want: nil},
		{name: "clusterNetwork by path", conf: map[string]any{"clusterNetwork": "/etc/cni/net.d/10-calico.conflist"}, podNS: "default", want: nil},
		{name: "clusterNetwork by name", conf: map[string]any{"clusterNetwork": " k8s-pod-network "}, podNS: "default", want: []string{"kube-system/k8s-pod-network"}},
		{name: "defaultNetworks by name and path", conf: map[string]any{"clusterNetwork": "cn", "defaultNetworks": []string{"d1", "/x/d2.conf"}}, podNS: "default", want: []string{"kube-system/cn", "kube-system/d1"}},
		{name: "system namespace gets no defaultNetworks", conf: map[string]any{"clusterNetwork": "cn", "defaultNetworks": []string{"d1"}}, podNS: "kube-system", want: []string{"kube-system/cn"}},
		{name: "multusNamespace", conf: map[string]any{"clusterNetwork": "cn", "multusNamespace": "net-admin"}, podNS: "default", want: []string{"net-admin/cn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, k := range staticNADKeys(parseTestConf(t, tc.conf), tc.podNS) {
				got = append(got, k.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("keys %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPrefetchReadsEachNADOnce: the NADs of an annotation are read together,
// each distinct one once, not past a selection that isolation forbids; the
// ordered lookup then reads nothing more and reports each answer as a direct
// read would. prefetch only starts the reads.
func TestPrefetchReadsEachNADOnce(t *testing.T) {
	nadConf := `{"cniVersion":"1.0.0","type":"noop"}`
	api := &fakeAPI{
		nads:    map[string]string{"default/a": nadConf, "default/b": nadConf, "other/c": nadConf},
		nadErrs: map[string]error{"default/down": fmt.Errorf("get NAD: %w", k8sclient.ErrUnavailable)},
	}
	conf := parseTestConf(t, map[string]any{"namespaceIsolation": true})
	sels, err := netconf.ParseNetworksAnnotation("a, b, a, missing, down, other/c, b", "default")
	if err != nil {
		t.Fatal(err)
	}
	cache := newNADCache(api, nil, "")
	cache.prefetch(context.Background(), conf, "default", sels)
	var started []string
	cache.mu.Lock()
	for k := range cache.reads {
		started = append(started, k.String())
	}
	cache.mu.Unlock()
	slices.Sort(started)
	cache.fetch(context.Background(), []nadKey{{"default", "a"}, {"default", "b"}, {"default", "down"}, {"default", "missing"}})
	got := api.reads()
	slices.Sort(got)
	if !slices.Equal(started, got) {
		t.Fatalf("prefetch started reads of %v, and the server saw %v", started, got)
	}
	if want := []string{"default/a", "default/b", "default/down", "default/missing"}; !slices.Equal(got, want) {
		t.Fatalf("prefetch read %v, want %v (each once, and not other/c, which isolation forbids)", got, want)
	}
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if def, found, err := cache.NAD(ctx, "default", name); err != nil || !found || def.config != nadConf {
			t.Errorf("%s: %q %v %v", name, def.config, found, err)
		}
	}
	if _, found, err := cache.NAD(ctx, "default", "missing"); err != nil || found {
		t.Errorf("missing: found %v, err %v", found, err)
	}
	_, _, err = cache.NAD(ctx, "default", "down")
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != 11 || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("down: %v, want code 11", err)
	}
	if n := len(api.reads()); n != 4 {
		t.Errorf("the ordered lookup read again: %v", api.reads())
	}
}

// apiCall is an ADD call of pod default/p (UID u) with the config keys in
// extra, and a plugin whose API is api.
func apiCall(t *testing.T, api podAPI, extra map[string]any) (*Plugin, *call) {
	t.Helper()
	p := &Plugin{newAPI: func(*netconf.Config) (podAPI, error) { return api, nil }}
	c := &call{conf: parseTestConf(t, extra), args: &skel.CmdArgs{IfName: "eth0"}, pod: netconf.PodRef{Namespace: "default", Name: "p", UID: "u"},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return p, c
}

// TestStaticNADsReadDuringPodRead: the clusterNetwork and defaultNetworks NADs
// are read while the pod is, not after it, and only once.
func TestStaticNADsReadDuringPodRead(t *testing.T) {
	def := `{"cniVersion":"1.0.0","type":"noop"}`
	api := &fakeAPI{
		pod:  &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"},
		nads: map[string]string{"kube-system/cluster-net": def, "kube-system/extra": def},
	}
	overlapped := false
	api.podHook = func() {
		// The pod answers only once both static NADs have been asked for:
		// read one after the other, they would not be yet.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if len(api.reads()) == 2 {
				overlapped = true
				return
			}
		}
	}
	p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net", "defaultNetworks": []string{"extra"}})
	pc, err := p.lookupPod(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Errorf("the static NADs were not read during the pod read: reads %v", api.reads())
	}
	atts, err := p.networksFor(context.Background(), c, pc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range atts {
		names = append(names, a.DisplayName()+"@"+a.IfName)
	}
	if want := []string{"kube-system/cluster-net@eth0", "kube-system/extra@net1"}; !slices.Equal(names, want) {
		b, _ := json.Marshal(atts)
		t.Errorf("attachments %v, want %v\n%s", names, want, b)
	}
	if r := api.reads(); len(r) != 2 {
		t.Errorf("NAD reads %v: want each static NAD read once", r)
	}
}

// TestNADReadsPerPod checks which NADs ADD reads: the static ones (here
// clusterNetwork), and the pod's networks once the pod is found; each once.
func TestNADReadsPerPod(t *testing.T) {
	def := `{"cniVersion":"1.0.0","type":"noop"}`
	for _, tc := range []struct {
		name  string
		pod   *k8sclient.Pod
		reads []string
	}{
		{
			name: "pod found",
			pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u",
				Annotations: map[string]string{annotNetworks: "net-a,other/net-b,net-a"}},
			reads: []string{"default/net-a", "kube-system/cluster-net", "other/net-b"},
		},
		{
			name:  "pod not found",
			reads: []string{"kube-system/cluster-net"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{pod: tc.pod, nads: map[string]string{"kube-system/cluster-net": def, "default/net-a": def, "other/net-b": def}}
			p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net"})
			pc, err := p.lookupPod(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.networksFor(context.Background(), c, pc); err != nil {
				t.Fatal(err)
			}
			got := api.reads()
			slices.Sort(got)
			if !slices.Equal(got, tc.reads) {
				t.Errorf("NAD reads %v, want %v", got, tc.reads)
			}
		})
	}
}

// TestRuntimePodAnnotations: when the runtime passes the pod's annotations
// (runtimeConfig, CapPodAnnotations), ADD reads no pod and builds the networks
// from them; the status patch is conditional on the runtime's K8S_POD_UID,
// except for a static pod, whose mirror in the API has a UID of its own; and
// the default network gets the annotations only when it declares the
// capability.
func TestRuntimePodAnnotations(t *testing.T) {
	noop := `{"cniVersion":"1.0.0","type":"noop"}`
	declares := `{"cniVersion":"1.0.0","type":"noop","capabilities":{"` + netconf.CapPodAnnotations + `":true}}`
	for _, tc := range []struct {
		name        string
		annotations map[string]any
		clusterNet  string
		wantUID     string
		wantPassed  bool // the default network's runtime config holds the annotations
	}{
		{name: "api pod", annotations: map[string]any{annotNetworks: "net-a"}, clusterNet: noop, wantUID: "u"},
		{name: "config.source api", annotations: map[string]any{annotNetworks: "net-a", annotConfigSource: "api"}, clusterNet: noop, wantUID: "u"},
		{name: "static pod", annotations: map[string]any{annotNetworks: "net-a", annotConfigSource: "file"}, clusterNet: noop, wantUID: ""},
		{name: "default network declares the capability", annotations: map[string]any{annotNetworks: "net-a"}, clusterNet: declares, wantUID: "u", wantPassed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The API's pod asks for another network: it must not be read.
			api := &fakeAPI{
				pod:  &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: map[string]string{annotNetworks: "net-b"}},
				nads: map[string]string{"kube-system/cluster-net": tc.clusterNet, "default/net-a": noop, "default/net-b": noop},
			}
			rc := map[string]any{netconf.CapPodAnnotations: tc.annotations, "portMappings": []any{}}
			p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net", "runtimeConfig": rc})
			p.now = time.Now
			ctx := context.Background()
			pc, err := p.lookupPod(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			atts, err := p.networksFor(ctx, c, pc)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, a := range atts {
				names = append(names, a.DisplayName()+"@"+a.IfName)
			}
			if want := []string{"kube-system/cluster-net@eth0", "default/net-a@net1"}; !slices.Equal(names, want) {
				t.Errorf("attachments %v, want %v", names, want)
			}
			_, passed := atts[0].RuntimeConfig[netconf.CapPodAnnotations]
			if passed != tc.wantPassed {
				t.Errorf("default network's runtime config %v: holds the annotations %v, want %v", atts[0].RuntimeConfig, passed, tc.wantPassed)
			}
			if _, ok := atts[0].RuntimeConfig["portMappings"]; !ok {
				t.Errorf("default network's runtime config %v lost portMappings", atts[0].RuntimeConfig)
			}
			results := make([]types.Result, len(atts))
			for i := range results {
				results[i] = &types100.Result{CNIVersion: "1.0.0", Interfaces: []*types100.Interface{{Name: atts[i].IfName, Sandbox: "/x"}}}
			}
			p.report(ctx, c, pc, atts, results, nil)
			api.mu.Lock()
			defer api.mu.Unlock()
			if api.podReads != 0 {
				t.Errorf("%d pod reads, want none", api.podReads)
			}
			if !slices.Equal(api.patchUIDs, []string{tc.wantUID}) {
				t.Errorf("status patches conditional on UIDs %q, want [%q]", api.patchUIDs, tc.wantUID)
			}
			if len(api.events) != 2 {
				t.Errorf("events %v, want one per attachment", api.events)
			}
		})
	}
}

// TestRuntimePodAnnotationsAbsent: with no annotations from the runtime (none
// passed, or null), the pod is read as before, and the status patch is
// conditional on the UID the API answered with.
func TestRuntimePodAnnotationsAbsent(t *testing.T) {
	for name, extra := range map[string]map[string]any{
		"none passed": nil,
		"null":        {"runtimeConfig": map[string]any{netconf.CapPodAnnotations: nil}},
	} {
		t.Run(name, func(t *testing.T) {
			api := &fakeAPI{pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}}
			p, c := apiCall(t, api, extra)
			pc, err := p.lookupPod(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if api.podReads != 1 || pc.pod != api.pod || pc.statusUID != "u" {
				t.Errorf("pod reads %d, pod %+v, status UID %q: want the API's pod, read once, and its UID", api.podReads, pc.pod, pc.statusUID)
			}
		})
	}
}

// TestRuntimePodAnnotationsReadsAtOnce: with the pod's annotations from the
// runtime, the pod's NADs are asked for while the static NADs' reads are still
// on the way, not after them.
func TestRuntimePodAnnotationsReadsAtOnce(t *testing.T) {
	noop := `{"cniVersion":"1.0.0","type":"noop"}`
	gate := make(chan struct{})
	api := &fakeAPI{
		nads:     map[string]string{"kube-system/cluster-net": noop, "default/net-a": noop, "kube-system/override": noop},
		nadGates: map[string]chan struct{}{"kube-system/cluster-net": gate},
	}
	rc := map[string]any{netconf.CapPodAnnotations: map[string]any{annotNetworks: "net-a", annotDefaultNetwork: "override"}}
	p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net", "runtimeConfig": rc})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		pc, err := p.lookupPod(ctx, c)
		if err == nil {
			_, err = p.networksFor(ctx, c, pc)
		}
		done <- err
	}()
	want := []string{"default/net-a", "kube-system/cluster-net", "kube-system/override"}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = api.reads()
		slices.Sort(got)
		if slices.Equal(got, want) {
			break
		}
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("while the static NAD was still being read, reads %v had started, want %v", got, want)
	}
	if n := len(api.reads()); n != 3 {
		t.Errorf("reads %v, want each NAD once", api.reads())
	}
}

// TestStatusWithoutAPIServer: with clusterNetwork naming a NAD, STATUS reads
// it. An API server that does not answer leaves STATUS to the readiness file
// (no error: the node's network is not "not ready" for it), while a NAD that
// is missing fails STATUS with code 7.
func TestStatusWithoutAPIServer(t *testing.T) {
	down := &fakeAPI{nadErrs: map[string]error{"kube-system/cluster-net": fmt.Errorf("get NAD: %w", k8sclient.ErrUnavailable)}}
	p, c := apiCall(t, down, map[string]any{"clusterNetwork": "cluster-net", "kubeconfig": "/etc/kubeconfig"})
	c.ctx = context.Background()
	if err := p.status(c); err != nil {
		t.Errorf("STATUS with the API server away: %v, want success from the readiness file alone", err)
	}
	if got := down.reads(); len(got) != 1 {
		t.Errorf("NAD reads %v, want the one of kube-system/cluster-net", got)
	}
	p, c = apiCall(t, &fakeAPI{}, map[string]any{"clusterNetwork": "cluster-net", "kubeconfig": "/etc/kubeconfig"})
	c.ctx = context.Background()
	if err := p.status(c); netconf.Code(err) != 7 || !strings.Contains(err.Error(), "cluster-net") {
		t.Errorf("STATUS with the NAD missing: %v, want code 7 naming it", err)
	}
}
