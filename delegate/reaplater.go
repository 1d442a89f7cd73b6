package delegate

import (
	"sync"
	"time"
)

// The reaps that ReapLater puts off: a queue of exited plugins, reaped in
// batches by one timer.

// reapDelay is how long a plugin has been a zombie, at least, when ReapLater
// reaps it: by then the plugin's threads have finished their own exit, which
// a reap at once waits for, spinning (docs/performance-history.md, change
// 18). Those threads run late on a busy node: at a load of 8 on 2 CPUs, a
// reap 5 ms after the exit still cost 0.8-1.6 ms, one 50 ms after it 0.1-0.3
// ms. A zombie holds only its pid and its task until then.
var reapDelay = 100 * time.Millisecond // a var for tests only

// reapBatch is the least time between two runs of the queue's timer. Each
// run wakes the process, and on an idle daemon the Go runtime's monitor
// thread too, so the reaps of a pod's delegates, which exit some tens of ms
// apart, are taken together: a plugin is reaped between reapDelay and
// reapDelay+reapBatch after its exit (docs/performance-history.md, change 22).
var reapBatch = 250 * time.Millisecond // a var for tests only

// lateReaps are the plugins waiting for their reap, in the order of their
// exits, and the timer that reaps them; timer is nil when none wait.
var lateReaps struct {
	sync.Mutex
	queue []lateReap
	timer *time.Timer
}

type lateReap struct {
	r      *reaper
	exited time.Time
}

// queueReap queues r to be reaped reapDelay after now, or a little later,
// with the others due by then.
func queueReap(r *reaper) {
	lateReaps.Lock()
	defer lateReaps.Unlock()
	lateReaps.queue = append(lateReaps.queue, lateReap{r: r, exited: time.Now()})
	if lateReaps.timer == nil {
		lateReaps.timer = time.AfterFunc(max(reapDelay, reapBatch), reapDue)
	}
}

// reapDue reaps every queued plugin that has been a zombie for reapDelay,
// and sets the timer again for the rest, if any, no sooner than reapBatch.
func reapDue() {
	lateReaps.Lock()
	now := time.Now()
	q := lateReaps.queue
	n := 0
	for n < len(q) && now.Sub(q[n].exited) >= reapDelay {
		n++
	}
	due := make([]*reaper, n)
	for i := range due {
		due[i] = q[i].r
	}
	var youngest time.Duration
	if n > 0 {
		youngest = now.Sub(q[n-1].exited)
	}
	lateReaps.queue = append(q[:0], q[n:]...)
	clear(q[len(q)-n:]) // the reaped ones' places past the new end
	if len(lateReaps.queue) > 0 {
		lateReaps.timer.Reset(max(reapDelay-now.Sub(lateReaps.queue[0].exited), reapBatch))
	} else {
		lateReaps.timer = nil
	}
	ran := reapRan
	lateReaps.Unlock()
	for _, r := range due {
		r.reap()
	}
	if ran != nil {
		ran(n, youngest)
	}
}

// reapRan, when set (by tests, under lateReaps' lock), hears of each run of
// the queue's timer: how many plugins it reaped, and how long the last of
// them had been a zombie.
var reapRan func(reaped int, youngest time.Duration)
