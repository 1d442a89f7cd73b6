package delegate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/scratch"
)

// DefaultPrestartGuard is how long a started process may wait for its turn
// (Exec.Guard).
const DefaultPrestartGuard = 5 * time.Second

// Exec runs delegate plugins for libcni. It can start the process of the call
// that it expects next before that call's turn (docs/performance-history.md, change 7;
// docs/configuration.md), so that the plugin's start-up (for a Go plugin,
// about 10 ms of runtime start and page faults) overlaps what comes before.
//
// A started process is given its config on stdin only when its turn comes, in
// order, after the call before it has returned; until then it has only its
// environment, and a CNI plugin reads its config before it acts. A process
// that is not used (the calls went another way, the ADD failed, or Close) is
// killed and reaped before it has read anything.
//
// One Exec serves one CNI call; it is not shared between calls.
type Exec struct {
	// Root, when set, is the host's root filesystem as mounted in the node
	// daemon's container: plugins run chrooted into it, and their paths are
	// paths inside it (manifold daemon --host-root).
	Root string
	// Stderr receives a plugin's stderr after it succeeded, as with libcni's
	// own exec; nil discards it.
	Stderr io.Writer
	// Guard bounds how long a started process waits for its turn. Past it
	// the process is killed, and started again when its turn comes. This
	// undoes the one way an early start could block: a plugin that took a
	// lock that the call before it needs, before reading stdin. 0 means
	// DefaultPrestartGuard.
	Guard time.Duration
	// Busy reports whether the node's CPUs are saturated; no process is
	// started early then (nil: cpuBusy).
	Busy func() bool
	// ReapLater answers a plugin's call as soon as it has exited and its
	// output is read, and reaps the process reapDelay to reapDelay+reapBatch
	// later, off the call's path, with the other plugins due by then, on one
	// timer (reaplater.go): reaped at once, a plugin that looked at its
	// threads in /proc (as the CNI ns package does) costs its reaper 1.5-2.5
	// ms of CPU, most of it spent waiting on the plugin's own exiting threads
	// (docs/performance-history.md, change 18). The node daemon and the
	// binary both set it.
	ReapLater bool
	// KeepPending keeps the reapers of the processes that ReapLater
	// answered, for ReapPending. The binary sets it and calls ReapPending
	// before it exits, so that it leaves no exited child to the node's init;
	// the daemon leaves each process to the timer.
	KeepPending bool

	mu sync.Mutex
	// notes is where a process started early notes its group as soon as
	// it starts (noteGroupsIn), nil before the call holds the lock.
	notes *scratch.GroupLog
	plan  []Call // the calls expected next, in order
	// anyOrder: the calls of plan come at once, in any order (a wave of
	// concurrent attachments); next serves whichever of them it matches,
	// and nothing more is started early.
	anyOrder bool
	next     *proc // started for plan[0] (anyOrder: for one of plan); nil if none
	stats    PrestartStats
	// pending are the reapers of the processes that ReapLater answered, with
	// KeepPending; ReapPending reaps those that their timer has not reaped yet.
	pending []*reaper
}

var _ invoke.Exec = (*Exec)(nil)

// Call is one expected plugin run: what libcni will pass to ExecPlugin.
type Call struct {
	Path string
	Env  []string // in any order
	// sorted is Env sorted (sortedEnv), set when the call is planned.
	sorted []string
}

// withSorted returns c with its sorted environment set.
func (c Call) withSorted() Call {
	if c.sorted == nil {
		c.sorted = sortedEnv(c.Env)
	}
	return c
}

// equal compares the environments as sets (sorted is the call's environment
// sortedEnv'd): libcni builds them through a map, so the order differs from
// one build to the next.
func (c Call) equal(path string, sorted []string) bool {
	return c.Path == path && slices.Equal(c.sorted, sorted)
}

// PrestartStats counts what became of started processes.
type PrestartStats struct {
	Started   int // processes started before their turn
	Used      int // of those, given their call
	Discarded int // killed unused: a different call came, Expect or Close, or the guard
	Skipped   int // not started early because the node was busy (cpuBusy)
}

// Expect sets the calls that come next, in order, and starts the first one's
// process. A process already waiting for exactly that call is kept. A nil or
// empty list stops any waiting process. Nil-safe, so that callers need not
// know whether early starts are on.
func (e *Exec) Expect(calls []Call) {
	e.expect(calls, false)
}

// ExpectAnyOrder sets calls that come next all at once, in any order: the
// first plugin call of each attachment of a wave that Add runs concurrently.
// A process already waiting for one of them is kept and serves it; no other
// is started early, since each starts at once anyway.
func (e *Exec) ExpectAnyOrder(calls []Call) {
	e.expect(calls, true)
}

func (e *Exec) expect(calls []Call, anyOrder bool) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.plan, e.anyOrder = make([]Call, len(calls)), anyOrder
	for i, c := range calls {
		e.plan[i] = c.withSorted()
	}
	var stale *proc
	if e.next != nil && e.planIndexLocked(e.next.call.Path, e.next.call.sorted) < 0 {
		stale, e.next = e.next, nil
		stale.guard.Stop()
		e.stats.Discarded++
	}
	e.startNextLocked()
	e.mu.Unlock()
	stale.kill()
}

// planIndexLocked is the position in plan of the call (path, and its
// environment sorted) as the plan expects it: in order, only plan[0]; in any
// order, any; -1 if none.
func (e *Exec) planIndexLocked(path string, sorted []string) int {
	for i, c := range e.plan {
		if c.equal(path, sorted) {
			return i
		}
		if !e.anyOrder {
			break
		}
	}
	return -1
}

// Close stops any waiting process. It is safe to call more than once, and on nil.
func (e *Exec) Close() {
	e.Expect(nil)
}

// ReapPending reaps, now, every process of this Exec's calls that ReapLater
// left to the reap timer and that the timer has not reaped yet; without
// KeepPending there are none. The binary calls
// it at the end of its call, before it exits: by then all but the last
// delegate have long finished their exit, so their reap is cheap, and no
// exited child is left to the node's init. Nil-safe.
func (e *Exec) ReapPending() {
	if e == nil {
		return
	}
	e.mu.Lock()
	pending := e.pending
	e.pending = nil
	e.mu.Unlock()
	for _, r := range pending {
		r.reap()
	}
}

// LogStats logs, at debug level, what became of the processes started early,
// if there were any.
func (e *Exec) LogStats(log *slog.Logger) {
	if e == nil {
		return
	}
	if s := e.Stats(); s.Started > 0 || s.Skipped > 0 {
		log.Debug("delegate processes started early", "started", s.Started, "used", s.Used, "discarded", s.Discarded, "skippedBusy", s.Skipped)
	}
}

// Stats reports what became of the processes started early so far.
func (e *Exec) Stats() PrestartStats {
	if e == nil {
		return PrestartStats{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// startNextLocked starts plan[0]'s process if there is none, in the
// background: the fork and exec take a millisecond or more, and the caller has
// its own work to do meanwhile. A failure to start is not an error here: the
// call starts its own process when its turn comes. A process still waiting
// after Guard is killed (and started again when its turn comes).
func (e *Exec) startNextLocked() {
	if e.next != nil || len(e.plan) == 0 || e.anyOrder {
		return
	}
	busy := e.Busy
	if busy == nil {
		busy = cpuBusy
	}
	if busy() {
		e.stats.Skipped++
		return
	}
	p := &proc{call: e.plan[0], started: make(chan struct{})}
	notes := e.notes
	go func() {
		p.err = e.startProc(p)
		if p.err == nil {
			p.note(notes)
		}
		close(p.started)
	}()
	guard := e.Guard
	if guard <= 0 {
		guard = DefaultPrestartGuard
	}
	p.guard = time.AfterFunc(guard, func() {
		e.mu.Lock()
		if e.next != p {
			e.mu.Unlock()
			return
		}
		e.next = nil
		e.stats.Discarded++
		e.mu.Unlock()
		p.kill()
	})
	e.next = p
	e.stats.Started++
}

// cpuBusy reports whether the run queue is long: more than busyPerCPU
// runnable tasks per CPU, from /proc/loadavg. An early start pays off when it
// runs on a CPU that has time for it; on a saturated node it only moves work
// ahead of other pods' delegates. On the 2-CPU benchmark machine, one pod at a
// time keeps at most about 11 tasks runnable, and 20 pods started at once
// 20 to 40 (docs/performance-history.md, change 7).
//
// The file is opened once and read again with pread, which makes procfs
// write it anew: an open of it cost more than the read (two early starts per
// pod, each with an open, the Go runtime's four fcntl and one epoll_ctl for
// it, an fstat, two reads and a close; docs/performance-history.md, change
// 23).
func cpuBusy() bool {
	text, ok := readLoadavg()
	return ok && busyFrom(text, runtime.NumCPU())
}

// readLoadavg returns what /proc/loadavg says now.
func readLoadavg() (string, bool) {
	loadavg.once.Do(func() {
		loadavg.fd = -1
		if fd, err := unix.Open("/proc/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			loadavg.fd = fd
		}
	})
	if loadavg.fd < 0 {
		return "", false
	}
	var b [128]byte
	n, err := unix.Pread(loadavg.fd, b[:], 0)
	return string(b[:max(n, 0)]), err == nil
}

// loadavg is /proc/loadavg, open for cpuBusy from its first call on.
var loadavg struct {
	once sync.Once
	fd   int
}

// busyPerCPU is how many runnable tasks per CPU make a node busy.
const busyPerCPU = 8

// busyFrom reads the running-task count from /proc/loadavg's text ("0.52
// 0.58 0.59 3/467 1234": 3 runnable) and compares it with busyPerCPU*ncpu.
// Anything it cannot read counts as not busy.
func busyFrom(loadavg string, ncpu int) bool {
	f := strings.Fields(loadavg)
	if len(f) < 4 {
		return false
	}
	running, _, _ := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(running)
	return err == nil && n > busyPerCPU*ncpu
}

// take returns the process waiting for this call, or nil, and moves the plan
// on. In order, a call the plan did not expect ends the plan, and the
// process waiting for another call is returned as stale. In any order, the
// waiting process serves only its own call, and waits for it otherwise.
func (e *Exec) take(path string, env []string) (mine, stale *proc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.plan) == 0 && e.next == nil {
		return nil, nil // nothing planned: no environment to compare
	}
	sorted := sortedEnv(env)
	i := e.planIndexLocked(path, sorted)
	switch {
	case i >= 0:
		e.plan = slices.Delete(e.plan, i, i+1)
	case !e.anyOrder:
		e.plan = nil
	}
	p := e.next
	if p == nil || (e.anyOrder && !p.call.equal(path, sorted)) {
		return nil, nil
	}
	e.next = nil
	p.guard.Stop()
	if i < 0 {
		e.stats.Discarded++
		return nil, p
	}
	return p, nil
}

// startNext starts the next expected call's process while the current call
// runs.
func (e *Exec) startNext() {
	e.mu.Lock()
	e.startNextLocked()
	e.mu.Unlock()
}

// outputDelay bounds the wait for a plugin's output after the plugin exited
// or was killed.
const outputDelay = time.Second

// busyRetries is how often a plugin that is being replaced ("text file
// busy") is tried again, a second apart, as libcni's own exec does.
const busyRetries = 5

// ExecPlugin runs the plugin at pluginPath with stdinData and environ, using
// the process started for this call if there is one. A failure is returned as
// the plugin's CNI error when it printed one, as libcni does.
func (e *Exec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	p, stale := e.take(pluginPath, environ)
	stale.kill()
	if p != nil {
		<-p.started
		e.mu.Lock()
		if p.err == nil {
			e.stats.Used++
		} else {
			p = nil // it could not be started early; try again now
		}
		e.mu.Unlock()
	}
	for attempt := 0; p == nil; attempt++ {
		p = &proc{call: Call{Path: pluginPath, Env: environ}}
		err := e.startProc(p)
		if err == nil {
			break
		}
		p = nil
		if !errors.Is(err, syscall.ETXTBSY) || attempt >= busyRetries {
			return nil, e.pluginError(pluginPath, err, nil, nil)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	done := p.give(ctx, stdinData, e.ReapLater)
	e.startNext()
	err := <-done
	if e.ReapLater && e.KeepPending {
		e.mu.Lock()
		e.pending = append(e.pending, p.reaper)
		e.mu.Unlock()
	}
	if err != nil && ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(err, errGroupLeft) {
			cause = fmt.Errorf("%w; %v", cause, err)
		}
		return nil, e.killedError(pluginPath, cause)
	}
	if err == nil && p.stdout.dropped > 0 {
		return nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("plugin %s wrote %d bytes to stdout, more than the limit of %d for a CNI result", pluginPath, int64(p.stdout.Len())+p.stdout.dropped, MaxPluginStdout), "")
	}
	if err != nil {
		return nil, e.pluginError(pluginPath, err, p.stdout.Bytes(), p.stderr.text())
	}
	if e.Stderr != nil && p.stderr.Len() > 0 {
		e.Stderr.Write(p.stderr.text())
	}
	return p.stdout.Bytes(), nil
}

// FindInPath finds plugin in paths; under Root, as seen from Root, returning
// its path inside Root.
func (e *Exec) FindInPath(plugin string, paths []string) (string, error) {
	if e.Root == "" {
		return invoke.FindInPath(plugin, paths)
	}
	rooted := make([]string, len(paths))
	for i, p := range paths {
		rooted[i] = filepath.Join(e.Root, p)
	}
	full, err := invoke.FindInPath(plugin, rooted)
	if err != nil {
		return "", fmt.Errorf("find plugin %q under host root %s: %w", plugin, e.Root, err)
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(full, filepath.Clean(e.Root)), "/"), nil
}

// Decode reads a plugin's VERSION answer.
func (e *Exec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(jsonBytes)
}
