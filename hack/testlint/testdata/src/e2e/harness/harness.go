// Package harness stands for the test harness packages under e2e/, every
// file of which is test code.
package harness

import (
	"fmt"
	"time"
)

func WaitGone(gone func() bool) error {
	time.Sleep(time.Second) // want `time.Sleep followed by a check`
	if !gone() {
		return fmt.Errorf("still there")
	}
	return nil
}

func WaitQuietly(done func() bool) {
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // want `poll loop leaves at its deadline without failing`
			break
		}
	}
}

func WaitOrFail(done func() bool) error {
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after a minute")
		}
	}
	return nil
}
