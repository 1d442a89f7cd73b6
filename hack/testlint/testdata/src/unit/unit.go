package unit

import (
	"testing"
	"time"
)

// A package's own code is no test: its sleeps and polls are the product's.
func settle(happened func() bool) error {
	time.Sleep(time.Millisecond)
	if happened() {
		panic("it happened")
	}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return nil
		}
	}
}

// A skip is a test's wherever it is written.
func SkipHelper(t testing.TB) {
	t.Skip("no reason to run") // want `skip that MANIFOLD_REQUIRE_PRIVILEGED=1 cannot turn into a failure`
}
