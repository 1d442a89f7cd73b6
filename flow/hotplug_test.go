package flow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// recorded is one attachment of a record as a test writes it: the interface
// and the annotation entry that asked for it ("" for the default network,
// "-" for one the config attached, defaultNetworks).
type recorded struct{ ifName, entry string }

// testRecord builds a record's attachments for pod namespace "default".
func testRecord(t *testing.T, atts ...recorded) *scratch.Record {
	t.Helper()
	rec := &scratch.Record{ContainerID: "c1"}
	for _, a := range atts {
		att := netconf.Attachment{IfName: a.ifName, Network: a.ifName + "-net"}
		switch a.entry {
		case "":
			att.IsDefault = true
		case "-":
		default:
			sels, err := netconf.ParseNetworksAnnotation(a.entry, "default")
			if err != nil || len(sels) != 1 {
				t.Fatalf("entry %q: %v, %d selections", a.entry, err, len(sels))
			}
			att.Request = netconf.SelectionKey(sels[0])
			att.NAD = sels[0].Namespace + "/" + sels[0].Name
		}
		rec.Attachments = append(rec.Attachments, att)
	}
	return rec
}

func selections(t *testing.T, annotation string) []netconf.NetworkSelection {
	t.Helper()
	sels, err := netconf.ParseNetworksAnnotation(annotation, "default")
	if err != nil {
		t.Fatalf("annotation %q: %v", annotation, err)
	}
	return sels
}

func selNames(sels []netconf.NetworkSelection) []string {
	out := []string{}
	for _, s := range sels {
		n := s.Namespace + "/" + s.Name
		if s.InterfaceRequest != "" {
			n += "@" + s.InterfaceRequest
		}
		out = append(out, n)
	}
	return out
}

// What an annotation adds, removes and keeps, against the record.
func TestDiffRequests(t *testing.T) {
	base := []recorded{{"eth0", ""}, {"net1", "a"}, {"net2", "b"}}
	cases := []struct {
		name       string
		record     []recorded
		annotation string
		removes    []string
		adds       []string
	}{
		{name: "unchanged", record: base, annotation: "a, b", removes: []string{}, adds: []string{}},
		{name: "order does not matter", record: base, annotation: "b, a", removes: []string{}, adds: []string{}},
		{name: "one added", record: base, annotation: "a, b, c", removes: []string{}, adds: []string{"default/c"}},
		{name: "one removed", record: base, annotation: "b", removes: []string{"net1"}, adds: []string{}},
		{name: "all removed, last attached first", record: base, annotation: "", removes: []string{"net2", "net1"}, adds: []string{}},
		{name: "removed and added", record: base, annotation: "a, c", removes: []string{"net2"}, adds: []string{"default/c"}},
		{name: "a changed field replaces the attachment", record: base, annotation: "a@net7, b",
			removes: []string{"net1"}, adds: []string{"default/a@net7"}},
		{name: "another namespace is another entry", record: base, annotation: "other/a, b",
			removes: []string{"net1"}, adds: []string{"other/a"}},
		{name: "the same entry twice is two attachments", record: base, annotation: "a, a, b",
			removes: []string{}, adds: []string{"default/a"}},
		{name: "swap on the same name", record: []recorded{{"eth0", ""}, {"net1", "a"}},
			annotation: `[{"name":"b","interface":"net1"}]`, removes: []string{"net1"}, adds: []string{"default/b@net1"}},
		{name: "an entry given the name its interface has keeps it", record: base, annotation: "a@net1, b@net2",
			removes: []string{}, adds: []string{}},
		{name: "names written in as the dynamic networks controller's e2e does, with an entry added",
			record: base, annotation: `[{"name":"a","interface":"net1"},{"name":"b","interface":"net2"},{"name":"a","interface":"ens58","mac":"02:00:00:00:00:01"}]`,
			removes: []string{}, adds: []string{"default/a@ens58"}},
		{name: "a name taken out of an entry keeps the interface", record: []recorded{{"eth0", ""}, {"blue", "a@blue"}},
			annotation: "a", removes: []string{}, adds: []string{}},
		{name: "a name written in that the interface does not have replaces it", record: base, annotation: "a@net2, b",
			removes: []string{"net1"}, adds: []string{"default/a@net2"}},
		{name: "a named entry finds its interface among the same NAD's", record: []recorded{{"eth0", ""}, {"net1", "a"}, {"net2", "a"}},
			annotation: "a, a@net1", removes: []string{}, adds: []string{}},
		{name: "another field changed with the name written in replaces it", record: base,
			annotation: `[{"name":"a","interface":"net1","mac":"02:00:00:00:00:01"},{"name":"b"}]`,
			removes:    []string{"net1"}, adds: []string{"default/a@net1"}},
		{name: "cni-args numbers survive the name's removal", record: []recorded{{"eth0", ""}, {"net1", `[{"name":"a","cni-args":{"n":12345678901234567890}}]`}},
			annotation: `[{"name":"a","interface":"net1","cni-args":{"n":12345678901234567890}}]`, removes: []string{}, adds: []string{}},
		{name: "the default network and defaultNetworks are never removed",
			record:     []recorded{{"eth0", ""}, {"net1", "-"}, {"net2", "a"}},
			annotation: "", removes: []string{"net2"}, adds: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			removes, adds := diffRequests(scratch.Summarize(testRecord(t, tc.record...)).Attachments, selections(t, tc.annotation))
			if removes == nil {
				removes = []string{}
			}
			if got := selNames(adds); !slices.Equal(removes, tc.removes) || !slices.Equal(got, tc.adds) {
				t.Errorf("removes %q, adds %q; want removes %q, adds %q", removes, got, tc.removes, tc.adds)
			}
		})
	}
}

// planFor runs the diff and the plan of a hot-plug, with NADs a..e in
// namespace default served by a fake API, and returns the new attachments
// as "interface=NAD".
func planFor(t *testing.T, api *fakeAPI, record []recorded, annotation string) ([]string, error) {
	t.Helper()
	conf, err := netconf.ParseConfig(testConf(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	pod := &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u"}
	h := &hotplugCall{conf: conf, log: slog.New(slog.NewJSONHandler(io.Discard, nil)), api: api, pod: pod, id: "c1"}
	rec := testRecord(t, record...)
	removes, adds := diffRequests(scratch.Summarize(rec).Attachments, selections(t, annotation))
	atts, err := h.plan(context.Background(), &Plugin{}, rec, removes, adds)
	var out []string
	for _, a := range atts {
		out = append(out, a.IfName+"="+a.NAD)
	}
	return out, err
}

func planAPI() *fakeAPI {
	nads := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		nads["default/"+n] = `{"cniVersion":"1.0.0","type":"must-not-run"}`
	}
	return &fakeAPI{nads: nads}
}

// The interface names of a hot-plug: attachments that stay keep theirs, a
// new entry that names one gets it, and one that names none gets the lowest
// net<i> that is free once the removed ones are gone and the named ones
// taken.
func TestHotplugPlanNames(t *testing.T) {
	cases := []struct {
		name       string
		record     []recorded
		annotation string
		want       []string
	}{
		{name: "lowest free, around names that stay", record: []recorded{{"eth0", ""}, {"net1", "a"}, {"net3", "b"}},
			annotation: "a, b, c, d", want: []string{"net2=default/c", "net4=default/d"}},
		{name: "a removed name is free again", record: []recorded{{"eth0", ""}, {"net1", "a"}, {"net2", "b"}},
			annotation: "b, c", want: []string{"net1=default/c"}},
		{name: "swap on the same name", record: []recorded{{"eth0", ""}, {"net1", "a"}},
			annotation: `[{"name":"b","interface":"net1"}]`, want: []string{"net1=default/b"}},
		{name: "a named entry's name is taken before unnamed ones get theirs", record: []recorded{{"eth0", ""}},
			annotation: "c, d@net1", want: []string{"net2=default/c", "net1=default/d"}},
		{name: "a name that is not net<i> is not counted", record: []recorded{{"eth0", ""}, {"blue", "a"}},
			annotation: "a, e", want: []string{"net1=default/e"}},
		{name: "defaultNetworks' names are taken", record: []recorded{{"eth0", ""}, {"net1", "-"}},
			annotation: "c", want: []string{"net2=default/c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := planAPI()
			got, err := planFor(t, api, tc.record, tc.annotation)
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("new attachments %q, want %q", got, tc.want)
			}
			if len(api.events) != 0 {
				t.Errorf("events %q for a change that can be made, want none", api.events)
			}
		})
	}
}

// A change that cannot be made as asked is refused as a whole, before
// anything changes, with one Warning naming the network and the reason.
func TestHotplugPlanRefused(t *testing.T) {
	cases := []struct {
		name       string
		record     []recorded
		annotation string
		mention    []string
	}{
		{name: "a name taken by an attachment that stays", record: []recorded{{"eth0", ""}, {"net1", "a"}},
			annotation: "a, b@net1", mention: []string{"default/b", "net1", "already taken"}},
		{name: "the default network's name", record: []recorded{{"eth0", ""}},
			annotation: "b@eth0", mention: []string{"default/b", "eth0", "already taken"}},
		{name: "two new entries on one name", record: []recorded{{"eth0", ""}},
			annotation: "b@net4, c@net4", mention: []string{"default/c", "net4", "already taken"}},
		{name: "a missing NAD, after one that could be made", record: []recorded{{"eth0", ""}},
			annotation: "b, nope", mention: []string{"default/nope", "not found"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := planAPI()
			got, err := planFor(t, api, tc.record, tc.annotation)
			if !errors.Is(err, ErrHotplugRefused) {
				t.Fatalf("plan = %q, %v; want an error wrapping ErrHotplugRefused", got, err)
			}
			if len(got) != 0 {
				t.Errorf("plan returned attachments %q with its refusal", got)
			}
			if len(api.events) != 1 || !strings.HasPrefix(api.events[0], "Warning HotplugFailed ") {
				t.Fatalf("events %q, want one Warning HotplugFailed", api.events)
			}
			for _, m := range tc.mention {
				if !strings.Contains(api.events[0], m) {
					t.Errorf("event %q does not name %q", api.events[0], m)
				}
			}
			// The error (the daemon's log) holds the reason; the Warning
			// adds the network where the reason does not name it.
			if reason := tc.mention[len(tc.mention)-1]; !strings.Contains(err.Error(), reason) {
				t.Errorf("error %q does not hold %q", err, reason)
			}
		})
	}
}

// TestReconcileNoChangeReadsNoConfigs: a reconcile whose annotation asks for
// nothing new reads the record's summary only, whatever the size of its
// configs. Before, it read and decoded the whole record: a pod with many
// large NADs cost the daemon about 430 ms and 61 MiB per edit of the pod
// (issue 26). Measured in bytes allocated, not in time.
func TestReconcileNoChangeReadsNoConfigs(t *testing.T) {
	dir := t.TempDir()
	node := &netconf.NodePaths{BinDir: dir, CNIDir: dir, ConfDir: dir, Kubeconfig: "/k"}
	p := NewShared("", node, func(*netconf.Config) (API, error) { return &fakeAPI{}, nil })
	rec := testRecord(t, recorded{"eth0", ""}, recorded{"net1", "a"})
	rec.Pod = netconf.PodRef{Namespace: "default", Name: "p", UID: "u"}
	rec.Config = testConf(t, map[string]any{"cniDir": dir, "binDir": dir, "kubeconfig": "/k"})
	const size = 8 << 20
	for i := range rec.Attachments {
		rec.Attachments[i].Config = []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","pad":"` + strings.Repeat("x", size/2) + `"}]}`)
	}
	if err := (&scratch.Store{Dir: dir}).Save(rec); err != nil {
		t.Fatal(err)
	}
	pod := &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: map[string]string{annotNetworks: "a"}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := p.Reconcile(context.Background(), "c1", pod)
	runtime.ReadMemStats(&after)
	if err != nil || res != (Hotplug{}) {
		t.Fatalf("Reconcile = %+v, %v; want nothing done", res, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a no-op reconcile allocated %d bytes", alloc)
	if alloc > size/16 {
		t.Errorf("a reconcile that changes nothing allocated %d bytes for a record of %d MiB of configs; want the summary's few KiB", alloc, size>>20)
	}
}
