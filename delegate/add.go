package delegate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// Add attaches rec.Attachments in order and returns one result per attachment.
//
// The record is saved before the first delegate runs, so a crash at any point
// leaves enough on disk for DEL or GC to undo what was done. If attachment k fails,
// DEL runs for attachments k..0 in reverse order (the failed one too, since it may
// have half-attached), the record is removed, and the original error is returned
// with the network and interface named and the delegate's CNI code kept. When
// Confirm refuses attachment k, it is the same with k-1..0, and Confirm's error.
func (r *Runner) Add(ctx context.Context, rec *scratch.Record) ([]types.Result, error) {
	l, err := r.lock(ctx, rec.ContainerID)
	if err != nil {
		return nil, err
	}
	unlocked := false
	defer func() {
		if !unlocked {
			l.Unlock(false)
		}
	}()
	if err := r.endLeftovers(l, rec.ContainerID); err != nil {
		r.Log.Warn("processes that a killed call on this container left running are still there", "error", err)
	}
	ctx = r.noteIn(ctx, l)

	// The first delegate's process may already be waiting (plugin ADD starts
	// it while the API is read); it gets its config only after Save.
	r.ExpectAdd(rec)
	defer r.Prestart.Close()
	if err := r.Store.Save(rec); err != nil {
		return nil, saveError(err)
	}

	// fail undoes attachments last..0 in reverse order, removes the record
	// and the lock file, and returns err.
	fail := func(last int, err error) ([]types.Result, error) {
		r.Prestart.Close()
		r.rollback(ctx, rec, last)
		if rmErr := r.Store.Remove(rec.ContainerID); rmErr != nil {
			r.Log.Warn("remove scratch record after rollback", "error", rmErr)
		}
		l.Unlock(true)
		unlocked = true
		return nil, err
	}

	results := make([]types.Result, len(rec.Attachments))
	for _, wave := range waves(rec.Attachments, r.Concurrent) {
		if len(wave) > 1 {
			if last, err := r.addWave(ctx, rec, wave, results); err != nil {
				return fail(last, err)
			}
			continue
		}
		i := wave[0]
		if err := r.confirm(ctx, rec, i); err != nil {
			return fail(i-1, err) // attachment i was not attempted
		}
		if r.Prepare != nil {
			r.Prepare(&rec.Attachments[i])
		}
		res, err := r.addOne(ctx, rec, &rec.Attachments[i])
		if err != nil {
			return fail(i, err) // it may have half-attached
		}
		results[i] = res
	}

	if err := r.applyDefaultRoute(ctx, rec, results); err != nil {
		return fail(len(rec.Attachments)-1, err)
	}
	return results, nil
}

// addWave attaches the attachments of one wave (their positions, in order)
// at once, each in its own goroutine, and fills in their results. Each is
// confirmed first, in order, and its node files prepared, so the record holds
// all of them before any runs. When one fails, it waits for the others, and
// returns the error of the first failed in attachment order, with the last
// position attempted: the caller undoes everything up to it, the wave's
// attachments that succeeded included. A refused confirmation returns the
// position before the wave: nothing of it was attempted.
func (r *Runner) addWave(ctx context.Context, rec *scratch.Record, wave []int, results []types.Result) (int, error) {
	for _, i := range wave {
		if err := r.confirm(ctx, rec, i); err != nil {
			return wave[0] - 1, err
		}
	}
	r.expectWave(rec, wave)
	atts := make([]string, 0, len(wave))
	for _, i := range wave {
		atts = append(atts, rec.Attachments[i].IfName)
		if r.Prepare != nil {
			r.Prepare(&rec.Attachments[i])
		}
	}
	r.Log.Debug("delegates add at once (concurrentAttachments)", "attachments", strings.Join(atts, ","))
	errs := make([]error, len(rec.Attachments))
	var wg sync.WaitGroup
	for _, i := range wave {
		wg.Go(func() { results[i], errs[i] = r.addOne(ctx, rec, &rec.Attachments[i]) })
	}
	wg.Wait()
	last := wave[len(wave)-1]
	for _, i := range wave {
		if errs[i] != nil {
			return last, errs[i]
		}
	}
	// Back to one at a time: plan the early starts of what follows.
	rest := make([]*netconf.Attachment, 0, len(rec.Attachments)-last-1)
	for j := last + 1; j < len(rec.Attachments); j++ {
		rest = append(rest, &rec.Attachments[j])
	}
	r.expect("ADD", rec, rest)
	return last, nil
}

// confirm asks Confirm about attachment i (i > 0). A replacement is saved in
// the record before it runs, so that the record always holds what DEL needs
// for every attachment attempted; the processes started early are planned
// again from it.
func (r *Runner) confirm(ctx context.Context, rec *scratch.Record, i int) error {
	if i == 0 || r.Confirm == nil {
		return nil
	}
	repl, err := r.Confirm(ctx, i, &rec.Attachments[i])
	if err != nil || repl == nil {
		return err
	}
	rec.Attachments[i] = *repl
	if err := r.Store.Save(rec); err != nil {
		return saveError(err)
	}
	rest := make([]*netconf.Attachment, 0, len(rec.Attachments)-i)
	for j := i; j < len(rec.Attachments); j++ {
		rest = append(rest, &rec.Attachments[j])
	}
	r.expect("ADD", rec, rest)
	return nil
}

// saveError gives a record that is too large to be written code 7: the pod's
// networks' configs are too large together, and a retry cannot help. Other
// failures to save (a full or read-only disk) keep their own error.
func saveError(err error) error {
	if errors.Is(err, scratch.ErrTooLarge) {
		return netconf.Invalid("%v", err)
	}
	return err
}

// undoContext is the context of one delegate's DEL, in a rollback or in DEL:
// ctx's values without its end, bounded by UndoTimeout. Each DEL has a budget
// of its own, so that a delegate that hangs, and is killed at the bound,
// costs the others nothing: they are still deleted. A cancelled call (the
// runtime hung up) does not stop its clean-up half-way either.
func (r *Runner) undoContext(ctx context.Context) (context.Context, context.CancelFunc) {
	t := r.UndoTimeout
	if t <= 0 {
		t = netconf.DefaultCallTimeout
	}
	return context.WithTimeoutCause(context.WithoutCancel(ctx), t, fmt.Errorf("its DEL ran past its own bound (callTimeout %s)", t))
}

func (r *Runner) addOne(ctx context.Context, rec *scratch.Record, att *netconf.Attachment) (types.Result, error) {
	list, err := confList(att)
	if err != nil {
		return nil, netconf.Invalid("add network %s as %s: %v", att.DisplayName(), att.IfName, err)
	}
	r.Log.Debug("delegate add", "network", att.DisplayName(), AttachmentIfnameKey, att.IfName, "plugins", len(list.Plugins))
	res, err := r.CNI.AddNetworkList(ctx, list, runtimeConf(rec, att))
	if err != nil {
		return nil, wrapDelegateError(err, "add network %s as %s", att.DisplayName(), att.IfName)
	}
	return res, nil
}

// rollback runs DEL for attachments last..0, in reverse order. Failures are logged:
// the caller returns the ADD's own error, which is what the runtime needs to see.
func (r *Runner) rollback(ctx context.Context, rec *scratch.Record, last int) {
	for i := last; i >= 0; i-- {
		if err := r.delBounded(ctx, rec, &rec.Attachments[i], r.Store.Path(rec.ContainerID)); err != nil {
			r.Log.Error("rollback: delete failed", "network", rec.Attachments[i].DisplayName(), AttachmentIfnameKey, rec.Attachments[i].IfName, "error", err)
		}
	}
}

// wrapDelegateError names what failed while keeping the delegate's CNI code. It
// returns a *types.Error, because that is what reaches the runtime with its code;
// plugin errors carry no further structure worth unwrapping.
func wrapDelegateError(err error, format string, args ...any) *types.Error {
	code := uint(types.ErrInternal)
	var te *types.Error
	if errors.As(err, &te) {
		code = te.Code
	}
	return types.NewError(code, fmt.Sprintf(format, args...)+": "+err.Error(), "")
}
