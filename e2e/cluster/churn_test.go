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

	mu        sync.Mutex
	created   int
	ran       int
	lives     []life // of the pods that ran
	settingUp int    // pods created and not yet running
	retried   int    // pods whose sandbox failed at least once before running
	slowest   time.Duration
	failures  []string
}

func startChurn(e *tenv, workers int) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	ch := &churn{e: e, cancel: cancel}
	// A test that fails midway stops its churn before its pods are deleted.
	e.t.Cleanup(func() {
		cancel()
		ch.wg.Wait()
	})
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
	ch.count(func() { ch.created++; ch.settingUp++ })
	start := time.Now()
	running, err := e.c.WaitRunning(context.Background(), p, podWait)
	ch.count(func() { ch.settingUp-- })
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
		ranAt := time.Now()
		ch.count(func() {
			ch.ran++
			ch.lives = append(ch.lives, life{start, ranAt})
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

// life is when a pod of the churn was created and when it ran.
type life struct{ created, ran time.Time }

// waitRan waits until n more pods than now have run, so that a step of a test
// happens under churn and not before it gets going; it fails the test when
// they do not within podWait: the churn has stopped.
func (ch *churn) waitRan(n int) {
	ch.e.t.Helper()
	_, base := ch.snapshot()
	deadline := time.Now().Add(podWait)
	for {
		_, ran := ch.snapshot()
		if ran >= base+n {
			return
		}
		if time.Now().After(deadline) {
			ch.e.t.Fatalf("churn: %d pods ran in %s, want %d: the churn has stopped", ran-base, podWait, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// step runs a step of a test, and then waits until n pods of the churn that
// were set up across it ran: created before it ended, running after it
// began. It fails the test when they do not within podWait: the step ran
// without churn under it.
func (ch *churn) step(name string, n int, do func()) {
	ch.e.t.Helper()
	// A step may take less time than a pod's set-up: it begins while a pod
	// of the churn is being set up.
	for deadline := time.Now().Add(podWait); ; time.Sleep(20 * time.Millisecond) {
		ch.mu.Lock()
		busy := ch.settingUp > 0
		ch.mu.Unlock()
		if busy {
			break
		}
		if time.Now().After(deadline) {
			ch.e.t.Fatalf("churn: no pod being set up for %s before %s: the churn has stopped", podWait, name)
		}
	}
	began := time.Now()
	do()
	ended := time.Now()
	across := func() int {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		k := 0
		for _, l := range ch.lives {
			if l.created.Before(ended) && !l.ran.Before(began) {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(podWait)
	for {
		k := across()
		if k >= n {
			ch.e.t.Logf("%s: %d pods of the churn set up across it (%s)", name, k, ended.Sub(began).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			ch.e.t.Fatalf("churn: %d pods set up across %s (%s to %s) ran, want %d: the step ran without churn under it",
				k, name, began.Format("15:04:05.000"), ended.Format("15:04:05.000"), n)
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
