package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// churn creates and deletes pods without pause: each worker creates a pod
// that asks for the two extra networks, waits for it to run, checks that it
// has them, deletes it and waits for it to go, and starts again.
type churn struct {
	e      *tenv
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	created  int
	ran      int
	retried  int // pods whose sandbox failed at least once before running
	slowest  time.Duration
	failures []string
}

func startChurn(e *tenv, workers int) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	ch := &churn{e: e, cancel: cancel}
	for i := range workers {
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			for ctx.Err() == nil {
				ch.one(ctx, fmt.Sprintf("churn%d-", i))
			}
		}()
	}
	return ch
}

// one is a pod's life. A pod being set up when the churn stops is still
// seen through: every pod created must run with its networks.
func (ch *churn) one(ctx context.Context, prefix string) {
	e := ch.e
	p, err := e.createPod(prefix)
	if err != nil {
		if ctx.Err() == nil {
			ch.fail("create pod: %v", err)
			time.Sleep(time.Second)
		}
		return
	}
	ch.count(func() { ch.created++ })
	start := time.Now()
	running, err := e.c.WaitRunning(context.Background(), p, podWait)
	if err != nil {
		ch.fail("%v", err)
	} else {
		took := time.Since(start)
		if err := e.checkNetworks(running); err != nil {
			ch.fail("%v\n%s", err, e.manifoldLog(running.Name))
		}
		failed := 0
		for _, ev := range e.c.Events(context.Background(), running) {
			if ev.Reason == "FailedCreatePodSandBox" {
				failed++
			}
		}
		ch.count(func() {
			ch.ran++
			ch.slowest = max(ch.slowest, took)
			if failed > 0 {
				ch.retried++
			}
		})
	}
	if err := e.c.DeleteAndWait(context.Background(), podWait, p); err != nil {
		ch.fail("%v", err)
	}
}

func (ch *churn) count(f func()) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	f()
}

func (ch *churn) fail(format string, args ...any) {
	ch.count(func() { ch.failures = append(ch.failures, fmt.Sprintf(format, args...)) })
}

// snapshot is the counts so far.
func (ch *churn) snapshot() (created, ran int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.created, ch.ran
}

// waitRan waits until n more pods than now have run, so that a step of a test
// happens under churn and not before it gets going.
func (ch *churn) waitRan(n int) {
	_, base := ch.snapshot()
	deadline := time.Now().Add(podWait)
	for {
		if _, ran := ch.snapshot(); ran >= base+n || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop ends the churn once every pod in flight is through, and fails the test
// with what went wrong.
func (ch *churn) stop() {
	t := ch.e.t
	t.Helper()
	ch.cancel()
	ch.wg.Wait()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	t.Logf("churn: %d pods created, %d ran with all their networks (%d after a failed sandbox the kubelet retried); slowest to run: %s",
		ch.created, ch.ran, ch.retried, ch.slowest.Round(time.Millisecond))
	if len(ch.failures) > 0 {
		sort.Strings(ch.failures)
		t.Errorf("churn: %d failures:\n  %s", len(ch.failures), strings.Join(ch.failures, "\n  "))
	}
	if ch.ran == 0 {
		t.Errorf("churn: no pod ran")
	}
}

// podsRunning waits for every pod to run and checks its networks.
func (e *tenv) podsRunning(pods []*corev1.Pod) []*corev1.Pod {
	e.t.Helper()
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		running, err := e.c.WaitRunning(e.ctx(), p, podWait)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.checkNetworks(running); err != nil {
			e.t.Error(err)
		}
		out[i] = running
	}
	return out
}
