package maintenance

import "time"

// testSignal lets a test wait for what a service did (River's
// testsignal): the service signals after each pass, and a test that called
// init waits for the signal instead of sleeping. Not initialised, a signal
// costs nothing.
type testSignal[T any] struct {
	ch chan T
}

// init must be called before the service starts.
func (s *testSignal[T]) init() { s.ch = make(chan T, 1000) }

func (s *testSignal[T]) signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic("maintenance: test signal buffer full: a test stopped reading its signals")
	}
}

// fatalfer is the part of testing.TB wait needs (this file is part of the
// production build, which does not link package testing).
type fatalfer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// signalTimeout is generous: a loaded machine runs many database tests at
// once.
const signalTimeout = 20 * time.Second

// wait returns the next signal, or fails the test when none comes.
func (s *testSignal[T]) wait(tb fatalfer) T {
	tb.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(signalTimeout):
		tb.Fatalf("no signal within %v", signalTimeout)
		var zero T
		return zero
	}
}
