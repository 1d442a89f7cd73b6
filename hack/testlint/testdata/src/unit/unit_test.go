package unit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// The sleep check.

func sleepThenCheck(t *testing.T, happened func() bool) {
	time.Sleep(time.Second) // want `time.Sleep followed by a check`
	if happened() {
		t.Error("it happened")
	}
}

func sleepThenReturnVerdict(happened func() bool) error {
	time.Sleep(time.Second) // want `time.Sleep followed by a check`
	if happened() {
		return fmt.Errorf("it happened")
	}
	return nil
}

func sleepInRangeThenCheck(t *testing.T, cases []func() bool) {
	for _, happened := range cases {
		time.Sleep(time.Second) // want `time.Sleep followed by a check`
		if happened() {
			t.Fatal("it happened")
		}
	}
}

// A poll's pause: the loop looks again.
func sleepInPoll(t *testing.T, done func() bool) {
	deadline := time.Now().Add(time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("not done in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A poll after a sleep waits for its evidence.
func sleepThenPoll(t *testing.T, done func() bool) {
	time.Sleep(time.Second)
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not done in a minute")
		}
	}
}

// An error passed on is no check.
func sleepThenPassOn(step func() error) error {
	time.Sleep(time.Millisecond)
	if err := step(); err != nil {
		return err
	}
	return nil
}

func sleepMarked(t *testing.T, happened func() bool) {
	//testlint:sleep the product's only timer is this one, which the test owns
	time.Sleep(time.Second)
	if happened() {
		t.Error("it happened")
	}
}

func sleepMarkedWithoutReason(t *testing.T, happened func() bool) {
	//testlint:sleep // want `testlint:sleep marker gives no reason`
	time.Sleep(time.Second) // want `time.Sleep followed by a check`
	if happened() {
		t.Error("it happened")
	}
}

//testlint:nap why // want `testlint marker names no check`

// The deadline check.

func pollReturnsQuietly(t *testing.T, done func() bool) {
	deadline := time.Now().Add(time.Minute)
	for {
		if done() {
			return
		}
		if time.Now().After(deadline) { // want `poll loop leaves at its deadline without failing`
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func pollBreaksQuietly(t *testing.T, done func() bool) {
	for start := time.Now(); !done(); time.Sleep(time.Millisecond) {
		if time.Since(start) > time.Minute { // want `poll loop leaves at its deadline without failing`
			break
		}
	}
	t.Log("done")
}

func pollReturnsNil(ctx context.Context, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done(): // want `poll loop leaves at its deadline without failing`
			return nil
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func pollOnContextErr(ctx context.Context, done func() bool) {
	for !done() {
		if ctx.Err() != nil { // want `poll loop leaves at its deadline without failing`
			return
		}
	}
}

func pollFails(t *testing.T, done func() bool) {
	deadline := time.Now().Add(time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

func pollReturnsError(ctx context.Context, done func() bool) error {
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return errors.New("not done after a minute")
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func pollReturnsFalse(done func() bool) bool {
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// The last try is checked after the loop.
func pollBreaksThenChecks(t *testing.T, try func() error) {
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		err = try()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("after a minute: %v", err)
	}
}

func pollMarked(done func() bool) {
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
		//testlint:deadline best effort: the caller counts what is left either way
		if time.Now().After(deadline) {
			return
		}
	}
}

// The skip check.

func skipNoReason(t *testing.T) {
	t.Skip() // want `skip gives no reason`
}

func skipNow(t *testing.T) {
	t.SkipNow() // want `skip gives no reason`
}

func skipEmpty(t *testing.T) {
	t.Skip("") // want `skip gives no reason`
}

func skipUnguarded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root") // want `skip that MANIFOLD_REQUIRE_PRIVILEGED=1 cannot turn into a failure`
	}
}

func skipUnguardedTB(tb testing.TB) {
	tb.Skipf("no %s", "go command") // want `skip that MANIFOLD_REQUIRE_PRIVILEGED=1 cannot turn into a failure`
}

func skipGuarded(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("needs root, and MANIFOLD_REQUIRE_PRIVILEGED=1 forbids skipping")
		}
		t.Skip("needs root")
	}
}

const requireEnv = "MANIFOLD_REQUIRE_PRIVILEGED"

func skipGuardedByConst(t *testing.T, err error) {
	skip := func(format string, args ...any) {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if err != nil {
		skip("binaries: %v", err)
	}
}

// The guard must come first.
func skipGuardedAfter(t *testing.T) {
	t.Skip("needs root") // want `skip that MANIFOLD_REQUIRE_PRIVILEGED=1 cannot turn into a failure`
	_ = os.Getenv("MANIFOLD_REQUIRE_PRIVILEGED")
}

func skipMarked(t *testing.T) {
	if testing.Short() {
		//testlint:skip -short is the runner's own choice, which CI does not make
		t.Skip("slow")
	}
}
