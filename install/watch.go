package install

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settleDelay is how long a burst of filesystem events may last before we look.
// A writer that does not rename (create, write, write, close) produces a burst,
// and reading after the first event would see a half-written file.
const settleDelay = 100 * time.Millisecond

// watcher turns filesystem events in a few directories, and a poll tick, into
// "look again" wake-ups. The poll tick is the fallback for when inotify is not
// available (its limits are per user and often exhausted on busy nodes) and for
// changes inotify cannot see (a file system remounted under us).
type watcher struct {
	fs   *fsnotify.Watcher // nil without inotify
	tick *time.Ticker
	log  *slog.Logger
}

// newWatcher watches dirs (directories, not files: the kubelet and most CNI
// installers replace files by rename, which ends a watch on the file itself).
func newWatcher(dirs []string, poll time.Duration, notify bool, log *slog.Logger) *watcher {
	w := &watcher{tick: time.NewTicker(poll), log: log}
	if !notify {
		return w
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("inotify is not available; polling instead", "interval", poll, "error", err)
		return w
	}
	w.fs = fw
	slices.Sort(dirs)
	for _, d := range slices.Compact(dirs) {
		if err := fw.Add(d); err != nil {
			log.Warn("cannot watch directory; polling it instead", "dir", d, "interval", poll, "error", err)
		}
	}
	return w
}

// wait blocks until something may have changed, ctx is done, or timeout fires
// (a nil timeout never fires). It reports whether timeout fired.
func (w *watcher) wait(ctx context.Context, timeout <-chan time.Time) (timedOut bool) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	}
	select {
	case <-ctx.Done():
		return false
	case <-timeout:
		return true
	case <-w.tick.C:
		return false
	case err, ok := <-errs:
		if !ok {
			w.fs = nil // closed: fall back to polling rather than spin
			return false
		}
		// An overflow means events were lost: look now, as after an event.
		w.log.Warn("filesystem watch error", "error", err)
		return false
	case _, ok := <-events:
		if !ok {
			w.fs = nil
			return false
		}
		w.settle(ctx, events)
		return false
	}
}

// settle drains events until none has arrived for settleDelay, or at most
// ten times that, so a file rewritten without pause cannot starve us.
func (w *watcher) settle(ctx context.Context, events <-chan fsnotify.Event) {
	quiet := time.NewTimer(settleDelay)
	defer quiet.Stop()
	limit := time.NewTimer(10 * settleDelay)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-quiet.C:
			return
		case <-limit.C:
			return
		case _, ok := <-events:
			if !ok {
				return
			}
			quiet.Reset(settleDelay)
		}
	}
}

func (w *watcher) close() {
	w.tick.Stop()
	if w.fs != nil {
		w.fs.Close()
	}
}
