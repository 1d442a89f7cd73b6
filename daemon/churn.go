package daemon

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// churn limits how often one pod's networks may change. Each change that the
// hot-plug made (or tried: a failure counts too) makes the pod's next change
// wait longer, counted from the last one: base after the first, then twice
// as long each time, up to max. A pod left alone for max after its next
// change was allowed starts afresh (counted from the change itself, a change
// held back the whole of max, and made as soon as it was allowed, would
// start afresh each time, and the cap would never hold). A
// user who edits a pod's networks now and then never waits; a pod whose
// annotation is rewritten in a loop gets one change per max, so that it
// cannot keep the hot-plug workers, and the node's other pods, busy.
type churn struct {
	clk       clock.PassiveClock
	base, max time.Duration

	mu   sync.Mutex
	pods map[string]churnState
}

type churnState struct {
	changes int
	last    time.Time
}

func newChurn(clk clock.PassiveClock, base, max time.Duration) *churn {
	return &churn{clk: clk, base: base, max: max, pods: map[string]churnState{}}
}

// delay is how long the pod's next change must wait from now.
func (c *churn) delay(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.pods[key]
	if !ok {
		return 0
	}
	now := c.clk.Now()
	allowed := s.last.Add(c.wait(s.changes))
	if now.Sub(allowed) >= c.max {
		delete(c.pods, key)
		return 0
	}
	return max(allowed.Sub(now), 0)
}

// changed counts a change of the pod made now, and returns how many there
// were in a row and how long the next one must wait.
func (c *churn) changed(key string) (int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	s := c.pods[key]
	if now.Sub(s.last.Add(c.wait(s.changes))) >= c.max {
		s.changes = 0
	}
	s.changes++
	s.last = now
	c.pods[key] = s
	return s.changes, c.wait(s.changes)
}

// forget drops a pod that is gone.
func (c *churn) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, key)
}

// wait is the wait after n changes in a row.
func (c *churn) wait(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	w := c.base
	for i := 1; i < n && w < c.max; i++ {
		w *= 2
	}
	return min(w, c.max)
}
