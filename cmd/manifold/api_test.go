package main

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
		if cfg, found, err := cache.NADConfig(ctx, "default", name); err != nil || !found || cfg != nadConf {
			t.Errorf("%s: %q %v %v", name, cfg, found, err)
		}
	}
	if _, found, err := cache.NADConfig(ctx, "default", "missing"); err != nil || found {
		t.Errorf("missing: found %v, err %v", found, err)
	}
	_, _, err = cache.NADConfig(ctx, "default", "down")
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
func apiCall(t *testing.T, api podAPI, extra map[string]any) (*plugin, *call) {
	t.Helper()
	p := &plugin{newAPI: func(*netconf.Config) (podAPI, error) { return api, nil }}
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
