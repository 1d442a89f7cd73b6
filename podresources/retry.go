package podresources

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retry runs call, each attempt under its own deadline, until it succeeds,
// fails in a way a retry cannot help, the retry bound is reached, or ctx ends.
//
// ResourceExhausted is the kubelet's rate limiter (see
// https://github.com/kubernetes/kubernetes/pull/116459, which added it);
// Unavailable is a kubelet that is restarting behind a socket file that is
// still there. Both pass within moments, and Multus, which does not retry,
// fails the pod's ADD on them.
func (c *Client) retry(ctx context.Context, method string, call func(context.Context) error) error {
	b := c.backoff()
	start := time.Now()
	wait := b.Initial
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, c.timeout())
		err := call(callCtx)
		cancel()
		if err == nil {
			return nil
		}
		// The caller's own end comes first, so that it can be told by
		// errors.Is from anything the kubelet said.
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (after %d attempts, the last: %v)", method, ctx.Err(), attempt, err)
		}
		code := status.Code(err)
		if code != codes.ResourceExhausted && code != codes.Unavailable {
			return fmt.Errorf("%s: %w", method, err)
		}
		d := jitter(wait)
		if time.Since(start)+d > b.Total {
			return fmt.Errorf("%s: %w: %d attempts over %s, the last: %w",
				method, ErrRateLimited, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (after %d attempts, the last: %v)", method, ctx.Err(), attempt, err)
		case <-t.C:
		}
		wait = min(2*wait, b.Max)
	}
}

// jitter returns a duration in [d/2, d), so that callers refused together
// come back apart.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(half)
}
