package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/scratch"
)

// The hot-plug controller (docs/hotplug.md): every pod of this node that
// manifold attached, and whose networks annotation no longer matches its
// record, is handed to flow's Reconcile. A pod is queued when its networks
// annotation changes, and by the informer's first list and its periodic
// resync (which catches a change whose event was missed); other edits of a
// pod (labels, status) queue nothing. A container whose annotation a
// reconcile found applied is not reconciled again for the same annotation
// until its record changes. One pod is reconciled by one worker at a time
// (the queue's rule); a pod whose change failed is tried again with a
// growing backoff, and updates that bring the same annotation do not bring
// the retry forward; a pod whose networks keep changing waits longer and
// longer between changes (churn).

const (
	annotNetworks   = "k8s.v1.cni.cncf.io/networks"
	hotplugWorkers  = 4
	hotplugBaseWait = time.Second
	hotplugMaxWait  = 5 * time.Minute
)

// reconcileFunc brings one container to its pod's annotation: flow's
// Reconcile, or a test's stand-in.
type reconcileFunc func(ctx context.Context, containerID string, pod *k8sclient.Pod) (flow.Hotplug, error)

type hotplug struct {
	log       *slog.Logger
	reconcile reconcileFunc
	m         *metrics
	cniDir    string
	inf       cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[string]
	workers   sync.WaitGroup
	churn     *churn

	mu sync.Mutex
	// records maps each container with a record to its pod's UID.
	records map[string]string
	// failing holds, per pod key, the annotation whose change failed: an
	// update with the same one waits for the backoff's retry.
	failing map[string]string
	// applied holds, per container, the annotation that its last reconcile
	// found applied and the record as it was then.
	applied map[string]applied
}

type applied struct {
	annot  string
	record fileStamp
}

// newHotplug makes the controller; clk runs its queue's delays (a test's
// fake clock, or clock.RealClock).
func newHotplug(log *slog.Logger, reconcile reconcileFunc, m *metrics, cniDir string, inf cache.SharedIndexInformer, clk clock.WithTicker) (*hotplug, error) {
	h := &hotplug{
		log: log, reconcile: reconcile, m: m, cniDir: cniDir, inf: inf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](hotplugBaseWait, hotplugMaxWait),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk}),
		churn:   newChurn(clk, hotplugBaseWait, hotplugMaxWait),
		records: map[string]string{}, failing: map[string]string{}, applied: map[string]applied{},
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.enqueue,
		UpdateFunc: h.onUpdate,
		DeleteFunc: h.enqueue,
	})
	return h, err
}

// onUpdate is the informer's update of a pod, and its periodic resync (the
// same object twice). An update that leaves the networks annotation as it
// was changes nothing that the hot-plug reads.
func (h *hotplug) onUpdate(oldObj, obj any) {
	old, ok := oldObj.(*corev1.Pod)
	p, ok2 := obj.(*corev1.Pod)
	if ok && ok2 && old.ResourceVersion != p.ResourceVersion && old.Annotations[annotNetworks] == p.Annotations[annotNetworks] {
		return
	}
	h.enqueue(obj)
}

// run starts the informer and the workers; they stop when ctx is done.
// Every pod of the node comes first as an add, so the pods that changed
// while the daemon was down are reconciled at start.
func (h *hotplug) run(ctx context.Context) {
	go h.inf.Run(ctx.Done())
	go func() {
		<-ctx.Done()
		h.queue.ShutDown()
	}()
	for range hotplugWorkers {
		h.workers.Go(func() {
			for h.next(ctx) {
			}
		})
	}
}

// waitWithin waits for the workers to stop, at most bound.
func (h *hotplug) waitWithin(bound time.Duration) bool {
	done := make(chan struct{})
	go func() {
		h.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(bound):
		return false
	}
}

func (h *hotplug) synced() bool { return h.inf.HasSynced() }

func (h *hotplug) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if p, ok := obj.(*corev1.Pod); ok {
		h.mu.Lock()
		failed, isFailing := h.failing[key]
		h.mu.Unlock()
		if isFailing && failed == p.Annotations[annotNetworks] {
			return // its retry is queued, after a backoff
		}
		h.queue.Forget(key)
		if wait := h.churn.delay(key); wait > 0 {
			h.queue.AddAfter(key, wait)
			return
		}
	}
	h.queue.Add(key)
}

func (h *hotplug) next(ctx context.Context) bool {
	key, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(key)
	obj, exists, err := h.inf.GetStore().GetByKey(key)
	pod, _ := obj.(*corev1.Pod)
	if err != nil || !exists || pod == nil || pod.DeletionTimestamp != nil {
		// Gone or going: its DEL undoes everything, hot-plugged or not.
		h.churn.forget(key)
		h.settle(key, "", false, nil)
		h.m.observeHandled(false, nil)
		return true
	}
	annot := pod.Annotations[annotNetworks]
	var errs []error
	changed := false
	for _, id := range h.containersOf(string(pod.UID)) {
		record := stampOf(filepath.Join(h.cniDir, id))
		if h.isApplied(id, annot, record) {
			continue
		}
		start := time.Now()
		res, err := h.reconcile(ctx, id, &k8sclient.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Annotations: pod.Annotations})
		h.m.observeHotplug(res, err, time.Since(start))
		if err != nil {
			h.log.Warn("hot-plug failed; trying again after a backoff", "pod", key, "containerID", id, "error", err, "failures", h.queue.NumRequeues(key)+1)
			errs = append(errs, err)
		}
		made := res.Added+res.Removed > 0
		changed = changed || made
		// Found applied, on a record that no one rewrote meanwhile: the
		// next reconcile for the same annotation would do nothing.
		h.setApplied(id, applied{annot, record}, err == nil && !made && stampOf(filepath.Join(h.cniDir, id)) == record)
	}
	err = errors.Join(errs...)
	h.settle(key, annot, changed, err)
	h.m.observeHandled(changed, err)
	return true
}

func (h *hotplug) isApplied(id, annot string, record fileStamp) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.applied[id]
	return ok && a == applied{annot, record}
}

func (h *hotplug) setApplied(id string, a applied, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		h.applied[id] = a
	} else {
		delete(h.applied, id)
	}
}

// settle forgets a pod's backoff after a success, or queues its retry. A
// change made, or tried, counts towards the pod's churn.
func (h *hotplug) settle(key, annot string, changed bool, err error) {
	if changed || err != nil {
		if n, wait := h.churn.changed(key); n > 1 {
			h.log.Info("hot-plug: the pod's networks changed several times in a row; its next change waits", "pod", key, "changes", n, "wait", wait.String())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.failing, key)
		h.queue.Forget(key)
		return
	}
	h.failing[key] = annot
	h.queue.AddRateLimited(key)
}

// containersOf lists the containers whose record is for the pod uid. The
// directory is read each time; a record's summary is read once, when it
// first shows.
func (h *hotplug) containersOf(uid string) []string {
	entries, err := os.ReadDir(h.cniDir)
	if err != nil {
		return nil
	}
	store := &scratch.Store{Dir: h.cniDir}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(entries))
	var out []string
	for _, e := range entries {
		id := e.Name()
		// Skip a record being written (its temp file) and the locks.
		if !e.Type().IsRegular() || strings.HasPrefix(id, ".") || scratch.ValidateContainerID(id) != nil {
			continue
		}
		seen[id] = true
		podUID, known := h.records[id]
		if !known {
			sum, err := store.LoadSummary(id)
			if err != nil || sum == nil {
				continue
			}
			podUID = sum.Pod.UID
			h.records[id] = podUID
		}
		if podUID == uid && uid != "" {
			out = append(out, id)
		}
	}
	for id := range h.records {
		if !seen[id] {
			delete(h.records, id)
		}
	}
	for id := range h.applied {
		if !seen[id] {
			delete(h.applied, id)
		}
	}
	return out
}

// observeHotplug counts one reconcile, and the attachments it changed.
// observeHandled counts a pod that a worker was done with.
func (m *metrics) observeHandled(changed bool, err error) {
	if m == nil {
		return
	}
	switch {
	case err != nil:
		m.handled.WithLabelValues("error").Inc()
	case changed:
		m.handled.WithLabelValues("changed").Inc()
	default:
		m.handled.WithLabelValues("unchanged").Inc()
	}
}

func (m *metrics) observeHotplug(res flow.Hotplug, err error, took time.Duration) {
	if m == nil || res.Skipped != "" {
		return
	}
	m.hotplug.WithLabelValues("attach", "ok").Add(float64(res.Added))
	m.hotplug.WithLabelValues("detach", "ok").Add(float64(res.Removed))
	switch {
	case errors.Is(err, flow.ErrHotplugRefused):
		m.hotplug.WithLabelValues("reconcile", "refused").Inc()
	case err != nil:
		m.hotplug.WithLabelValues("reconcile", "error").Inc()
	case res.Added+res.Removed > 0:
		m.hotplug.WithLabelValues("reconcile", "ok").Inc()
		m.hotplugDur.Observe(took.Seconds())
	}
}
