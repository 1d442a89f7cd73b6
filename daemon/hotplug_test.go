package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// The hot-plug controller's queue, driven by hand: the informer's store and
// handlers are called directly, and a stand-in reconcile counts the calls
// (unit tier; the e2e tier runs the controller against a real API server).

type reconciles struct {
	mu     sync.Mutex
	annots []string
	result flow.Hotplug
}

func (r *reconciles) reconcile(_ context.Context, _ string, pod *k8sclient.Pod) (flow.Hotplug, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.annots = append(r.annots, pod.Annotations[annotNetworks])
	return r.result, nil
}

func (r *reconciles) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.annots)
}

type hotplugRig struct {
	t     *testing.T
	h     *hotplug
	q     *heldQueue
	r     *reconciles
	clk   *testingclock.FakeClock
	store *scratch.Store
	pod   *corev1.Pod
	rv    int
}

// heldQueue is the controller's queue, which records how long each key was
// asked to be held back. The queue releases a held key from a goroutine of
// its own, so a look at it right after the clock moves cannot tell "not yet"
// from "not released": what the controller asked for can.
type heldQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu   sync.Mutex
	held []time.Duration
}

func (q *heldQueue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	q.held = append(q.held, d)
	q.mu.Unlock()
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

// takeHeld returns the waits asked for since the last call.
func (q *heldQueue) takeHeld() []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.held
	q.held = nil
	return out
}

func newHotplugRig(t *testing.T) *hotplugRig {
	t.Helper()
	inf := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	g := &hotplugRig{t: t, r: &reconciles{}, clk: testingclock.NewFakeClock(time.Now()), store: &scratch.Store{Dir: t.TempDir()}}
	var err error
	g.h, err = newHotplug(slog.New(slog.DiscardHandler), g.r.reconcile, nil, g.store.Dir, inf, g.clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.h.queue.ShutDown)
	g.q = &heldQueue{TypedRateLimitingInterface: g.h.queue}
	g.h.queue = g.q
	g.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("uid-1"), ResourceVersion: "1",
		Annotations: map[string]string{annotNetworks: "a"}}}
	g.saveRecord("eth0")
	if err := inf.GetStore().Add(g.pod); err != nil {
		t.Fatal(err)
	}
	return g
}

// saveRecord writes the pod's record with the given interfaces, as an ADD
// (or a hot-plug) does.
func (g *hotplugRig) saveRecord(ifNames ...string) {
	g.t.Helper()
	rec := &scratch.Record{ContainerID: "c1", Pod: netconf.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}, Config: json.RawMessage(`{"cniVersion":"1.0.0"}`)}
	for i, n := range ifNames {
		rec.Attachments = append(rec.Attachments, netconf.Attachment{Network: "net" + strconv.Itoa(i), IfName: n, IsDefault: i == 0, Config: json.RawMessage(`{}`)})
	}
	if err := g.store.Save(rec); err != nil {
		g.t.Fatal(err)
	}
}

// update replaces the pod in the informer's store and calls the update
// handler, as the informer does; change edits a copy of the pod.
func (g *hotplugRig) update(change func(p *corev1.Pod)) {
	g.t.Helper()
	old := g.pod
	p := old.DeepCopy()
	change(p)
	g.rv++
	p.ResourceVersion = strconv.Itoa(100 + g.rv)
	if err := g.h.inf.GetStore().Update(p); err != nil {
		g.t.Fatal(err)
	}
	g.pod = p
	g.h.onUpdate(old, p)
}

// resync is the informer's periodic resync: the same object as old and new.
func (g *hotplugRig) resync() { g.h.onUpdate(g.pod, g.pod) }

// drain serves what is queued now, one item at a time.
func (g *hotplugRig) drain() {
	for g.h.queue.Len() > 0 {
		g.h.next(context.Background())
	}
}

// waitQueued waits (a did-not-hang bound) for an item that the queue's
// clock released.
func (g *hotplugRig) waitQueued(what string) {
	g.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.h.queue.Len() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: nothing queued after the clock passed its delay", what)
		}
	}
}

// waitTimer waits (a did-not-hang bound) until the queue has set its timer
// for a held key: a step of the clock before that would be missed, since the
// timer would count from the time after the step.
func (g *hotplugRig) waitTimer(what string) {
	g.t.Helper()
	// The queue's heartbeat ticker is the other waiter.
	for deadline := time.Now().Add(10 * time.Second); g.clk.Waiters() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: the queue set no timer for it", what)
		}
	}
}

func setNetworks(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[annotNetworks] = v }
}

// TestHotplugQueuesOnlyNetworksChanges: an update that leaves the networks
// annotation as it was (a label patch, a status write) queues nothing; a
// resync queues the pod, but a pod whose annotation was last found applied,
// on a record that has not changed since, is not reconciled again. Before,
// every update of every pod cost a reconcile, which loads and decodes the
// pod's whole record (issue 26: 430 ms and 61 MiB for a record near the cap).
func TestHotplugQueuesOnlyNetworksChanges(t *testing.T) {
	g := newHotplugRig(t)
	g.h.enqueue(g.pod) // the informer's first list
	g.drain()
	if got := g.r.count(); got != 1 {
		t.Fatalf("reconciles after the pod's add = %d, want 1", got)
	}
	g.update(func(p *corev1.Pod) { p.Labels = map[string]string{"x": "1"} })
	if got := g.h.queue.Len(); got != 0 {
		t.Errorf("a label patch queued %d items, want none", got)
	}
	g.update(func(p *corev1.Pod) { p.Annotations["other"] = "y" })
	if got := g.h.queue.Len(); got != 0 {
		t.Errorf("a change of another annotation queued %d items, want none", got)
	}
	g.drain()
	g.resync()
	if got := g.h.queue.Len(); got != 1 {
		t.Errorf("a resync queued %d items, want the pod", got)
	}
	g.drain()
	if got := g.r.count(); got != 1 {
		t.Errorf("reconciles after updates that changed nothing and a resync = %d, want still 1", got)
	}

	g.update(setNetworks("a, b"))
	g.drain()
	if got := g.r.count(); got != 2 || g.r.annots[1] != "a, b" {
		t.Errorf("reconciles after a change of the networks annotation = %v, want a second one with it", g.r.annots)
	}
	// A record written since (a new ADD of the container) is looked at
	// again at the next resync, whatever the annotation.
	g.resync()
	g.drain()
	if got := g.r.count(); got != 2 {
		t.Errorf("reconciles after a resync of an applied annotation = %d, want still 2", got)
	}
	g.saveRecord("eth0", "net1")
	g.resync()
	g.drain()
	if got := g.r.count(); got != 3 {
		t.Errorf("reconciles after a resync of a pod whose record was rewritten = %d, want 3", got)
	}
}

// TestHotplugBacksOffChurn: a pod whose networks annotation keeps changing,
// each change made, waits longer and longer before its next change: 1s after
// its second, then 2s, 4s, ... up to hotplugMaxWait (5 minutes, as
// docs/hotplug.md says), counted from its last change. The changes go on
// past the cap, so that a backoff that keeps doubling is seen; and each
// update comes a while after the change before it was made, so that a wait
// counted from the update (now) is told from one counted from that change.
// A pod left alone for hotplugMaxWait after its next change was allowed
// starts afresh. Before, every successful change reset the backoff: a tenant
// could keep the hot-plug workers busy with one pod.
func TestHotplugBacksOffChurn(t *testing.T) {
	if hotplugMaxWait != 5*time.Minute {
		t.Fatalf("hotplugMaxWait = %s; docs/hotplug.md says 5 minutes", hotplugMaxWait)
	}
	g := newHotplugRig(t)
	g.h.enqueue(g.pod)
	g.drain()
	g.r.result = flow.Hotplug{Added: 1}
	g.update(setNetworks("v1"))
	if got := g.h.queue.Len(); got != 1 {
		t.Fatalf("the first change queued %d items, want it served at once", got)
	}
	g.drain()
	// 1s << 9 is past the cap: changes 11 and 12 both wait the cap.
	const last = 12
	capped := 0
	for i := 2; i <= last; i++ {
		wait := min(hotplugBaseWait<<(i-2), hotplugMaxWait)
		if wait == hotplugMaxWait {
			capped++
		}
		// The update comes a quarter of the wait after change i-1 was
		// made: it is held back for the rest.
		since := wait / 4
		g.clk.Step(since)
		g.update(setNetworks("v" + strconv.Itoa(i)))
		if got := g.h.queue.Len(); got != 0 {
			t.Errorf("change %d, %s after change %d was made, was queued at once; want it held back %s", i, since, i-1, wait-since)
			g.drain()
			continue
		}
		if got := g.q.takeHeld(); !slices.Equal(got, []time.Duration{wait - since}) {
			t.Errorf("change %d, %s after change %d was made, was held back %v, want %s (the %s wait, counted from that change)", i, since, i-1, got, wait-since, wait)
		}
		g.waitTimer("change " + strconv.Itoa(i))
		g.clk.Step(wait - since)
		g.waitQueued("change " + strconv.Itoa(i))
		g.drain()
	}
	if capped < 2 {
		t.Fatalf("the test reached the cap %d times, want 2: raise last", capped)
	}
	if got, want := g.r.count(), last+1; got != want {
		t.Errorf("reconciles = %d (%v), want %d: every change is made in the end", got, g.r.annots, want)
	}
	// Left alone for hotplugMaxWait after its next change was allowed, the
	// pod starts afresh: that change is served at once, and the one after
	// it waits hotplugBaseWait again.
	g.clk.Step(hotplugMaxWait + hotplugMaxWait)
	g.update(setNetworks("after a quiet while"))
	if got := g.h.queue.Len(); got != 1 {
		t.Fatalf("a change after a quiet %s queued %d items, want it served at once", hotplugMaxWait, got)
	}
	g.drain()
	g.update(setNetworks("right after it"))
	if got := g.q.takeHeld(); !slices.Equal(got, []time.Duration{hotplugBaseWait}) {
		t.Errorf("the change after a quiet while's was held back %v, want %s: the pod starts afresh", got, hotplugBaseWait)
	}
}

// TestHotplugChurnHoldsOnlyThatPod: while a pod's next change is held back,
// another pod's change is served at once: the churning pod does not keep
// the workers from the node's other pods.
func TestHotplugChurnHoldsOnlyThatPod(t *testing.T) {
	g := newHotplugRig(t)
	g.r.result = flow.Hotplug{Added: 1}
	g.update(setNetworks("v1"))
	g.drain()
	g.update(setNetworks("v2"))
	if got := g.q.takeHeld(); !slices.Equal(got, []time.Duration{hotplugBaseWait}) {
		t.Fatalf("the pod's second change was held back %v, want %s", got, hotplugBaseWait)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q", UID: types.UID("uid-2"), ResourceVersion: "1",
		Annotations: map[string]string{annotNetworks: "a"}}}
	if err := g.h.inf.GetStore().Add(other); err != nil {
		t.Fatal(err)
	}
	changed := other.DeepCopy()
	changed.ResourceVersion = "2"
	changed.Annotations[annotNetworks] = "a, b"
	if err := g.h.inf.GetStore().Update(changed); err != nil {
		t.Fatal(err)
	}
	g.h.onUpdate(other, changed)
	if got := g.h.queue.Len(); got != 1 {
		t.Fatalf("another pod's change queued %d items while the first pod's is held back, want it served at once", got)
	}
	if held := g.q.takeHeld(); len(held) != 0 {
		t.Errorf("another pod's change was held back %v", held)
	}
	if key, _ := g.h.queue.Get(); key != "ns/q" {
		t.Errorf("queued %s, want the other pod ns/q", key)
	}
}
