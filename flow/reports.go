package flow

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// reports is the daemon's set of status writes still in flight. In the binary,
// ADD writes network-status and sends its events before it answers, because the
// process ends with the answer. The daemon answers first and writes them just
// after (docs/thick-mode.md): the pod's containers start while the patch is on
// its way, instead of after it. Two rules keep that safe:
//   - a CHECK or ADD of the same container waits for the container's write
//     before it starts, and a DEL before it answers, so a status never lands
//     after the DEL that undid it;
//   - the daemon waits for every write before it exits.
type reports struct {
	mu      sync.Mutex
	pending map[string]*pendingWrite
	wg      sync.WaitGroup
}

// pendingWrite is one container's write in flight. stop is closed when a call
// of the same container waits for it, or the daemon stops: the write then
// tries no more (statusRetries), and only its request in flight finishes.
type pendingWrite struct {
	done, stop chan struct{}
	once       sync.Once
}

func (w *pendingWrite) halt() { w.once.Do(func() { close(w.stop) }) }

// start runs write in the background for containerID, once after is closed
// (nil: at once).
func (r *reports) start(containerID string, after <-chan struct{}, write func(stop <-chan struct{})) {
	w := &pendingWrite{done: make(chan struct{}), stop: make(chan struct{})}
	r.mu.Lock()
	prev := r.pending[containerID]
	if r.pending == nil {
		r.pending = map[string]*pendingWrite{}
	}
	r.pending[containerID] = w
	r.mu.Unlock()
	r.wg.Go(func() {
		defer func() {
			r.mu.Lock()
			if r.pending[containerID] == w {
				delete(r.pending, containerID)
			}
			r.mu.Unlock()
			close(w.done)
		}()
		if prev != nil {
			<-prev.done
		}
		if after != nil {
			<-after
		}
		write(w.stop)
	})
}

// wait blocks until the container's write is done, or for at most bound: the
// write's requests are bounded by apiTimeout, so the bound is only a guard.
// It reports whether the write was done.
func (r *reports) wait(containerID string, bound time.Duration) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	w := r.pending[containerID]
	r.mu.Unlock()
	if w == nil {
		return true
	}
	w.halt()
	select {
	case <-w.done:
		return true
	case <-time.After(bound):
		return false
	}
}

// drain waits for every write in flight.
func (r *reports) drain() { r.wg.Wait() }

// drainWithin is drain for at most bound, at the daemon's exit. It reports
// whether every write was done.
func (r *reports) drainWithin(bound time.Duration) bool {
	r.mu.Lock()
	for _, w := range r.pending {
		w.halt()
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// callStderr is a daemon call's stderr. Until the answer is sent, it collects
// what the call logs, for the shim to pass to the runtime as the binary's
// stderr would be; after, a background status write still logs, and that goes
// to the daemon's own stderr.
type callStderr struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	sealed bool
	after  io.Writer
}

func (w *callStderr) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed {
		return w.after.Write(p)
	}
	return w.buf.Write(p)
}

// seal returns what was collected and sends later writes to after.
func (w *callStderr) seal() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sealed = true
	return w.buf.Bytes() // buf is not written after this
}

// awaitReport makes a verb on a container wait for that container's status
// write, in the daemon. The write's requests run concurrently, each bounded by
// apiTimeout, so it is done within apiTimeout; the extra second is slack.
func (p *Plugin) awaitReport(c *call) {
	if p.reports == nil || c.args.ContainerID == "" {
		return
	}
	bound := c.conf.APITimeout + time.Second
	if !p.reports.wait(c.args.ContainerID, bound) {
		c.log.Warn("the status write of an earlier ADD is still running; going on without it", "waited", bound.String())
	}
}
