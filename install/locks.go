package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// nodeLocks coordinate the installers on one node. During a DaemonSet rollout
// with maxSurge, the new pod starts before the old one stops, and two
// installers must neither fight over the host's files (the old one would keep
// putting back its own token, which dies with its pod) nor let the old one
// remove the config on its way out. Two flock files in the host dir do this;
// flock works across containers because they open the same host inode.
//   - present (shared, held for the installer's whole life): a stopping
//     installer removes its config only if it can take this exclusively,
//     that is, if no other installer is running.
//   - active (exclusive): only its holder writes. A new installer waits for
//     the old one to exit, then takes over at once.
//
// The kernel drops both when a process dies, so a killed installer never
// blocks its successor.
type nodeLocks struct {
	present, active *os.File
}

const (
	presentLockName = "installer.lock"
	activeLockName  = "active.lock"
	lockPoll        = 100 * time.Millisecond
)

// lockNode takes both locks, waiting (and saying so) while another installer
// is active. It returns ctx's error if the installer is stopped while waiting.
func lockNode(ctx context.Context, dir string, log *slog.Logger) (*nodeLocks, error) {
	l := &nodeLocks{}
	var err error
	// Waits only while a stopping installer holds it exclusively to clean up,
	// so that our config is written after its removal, not before.
	if l.present, err = lockFile(ctx, filepath.Join(dir, presentLockName), syscall.LOCK_SH, nil); err != nil {
		return nil, err
	}
	l.active, err = lockFile(ctx, filepath.Join(dir, activeLockName), syscall.LOCK_EX, func() {
		log.Info("another manifold installer is active on this node; waiting for it to stop")
	})
	if err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// lockFile opens path and takes the flock, polling so that ctx can interrupt
// the wait (a blocking flock cannot be cancelled). waiting runs once if the
// lock is not free at first.
func lockFile(ctx context.Context, path string, how int, waiting func()) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open installer lock: %w", err)
	}
	for first := true; ; first = false {
		err := flock(f, how|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// alone reports whether no other installer is running, and if so holds the
// present lock exclusively until release, so that no new installer starts
// writing while we clean up. A nil nodeLocks is alone.
func (l *nodeLocks) alone() bool {
	if l == nil {
		return true
	}
	return flock(l.present, syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

func (l *nodeLocks) release() {
	if l == nil {
		return
	}
	// Closing drops the flock.
	for _, f := range []*os.File{l.active, l.present} {
		if f != nil {
			f.Close()
		}
	}
}

// flock retries when a signal interrupts the call.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
