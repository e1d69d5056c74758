// Package testutil holds what tests across the module share: waiting on a
// condition with a deadline instead of sleeping.
package testutil

import (
	"fmt"
	"testing"
	"time"
)

// pollEvery is how often Eventually asks: often enough that a test waits
// little past the moment its condition comes true.
const pollEvery = 5 * time.Millisecond

// Eventually waits until cond is true, asking every few milliseconds, and
// fails t (with msgAndArgs: a message and its arguments, as fmt takes
// them) if it is not within timeout. cond runs on the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	if err := Within(timeout, cond); err != nil {
		t.Fatalf("%s: %v", message(msgAndArgs), err)
	}
}

// Within waits until cond is true, asking every few milliseconds, and
// returns an error if it is not within timeout: for a goroutine other
// than the test's, which must not call t.Fatal.
func Within(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(pollEvery)
	}
}

func message(msgAndArgs []any) string {
	switch {
	case len(msgAndArgs) == 0:
		return "condition"
	case len(msgAndArgs) == 1:
		return fmt.Sprint(msgAndArgs[0])
	}
	format, ok := msgAndArgs[0].(string)
	if !ok {
		return fmt.Sprint(msgAndArgs...)
	}
	return fmt.Sprintf(format, msgAndArgs[1:]...)
}
