package queue

import (
	"testing"
	"time"
)

// The blocked check reads the whole queue first, then only what was
// submitted since the last check (with a minute's slack), and the whole
// queue again every wholeEvery checks; a check cut short by its batch size
// does not move on.
func TestPlaceabilityChecksPace(t *testing.T) {
	t.Parallel()
	var p placeabilityChecks
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if !p.since().IsZero() {
		t.Fatal("the first check reads the whole queue")
	}
	p.done(at, true)
	for i := 1; i < wholeEvery; i++ {
		prev := at
		at = at.Add(10 * time.Second)
		if got, want := p.since(), prev.Add(-slack); !got.Equal(want) {
			t.Fatalf("check %d reads since %v, want %v", i, got, want)
		}
		p.done(at, true)
	}
	at = at.Add(10 * time.Second)
	if !p.since().IsZero() {
		t.Fatalf("check %d reads since %v: the whole queue is due", wholeEvery, p.since())
	}
	p.done(at, false)
	if !p.since().IsZero() {
		t.Fatal("a whole check cut short is done again")
	}
	p.done(at, true)
	next := at.Add(10 * time.Second)
	if got := p.since(); !got.Equal(at.Add(-slack)) {
		t.Fatalf("after a whole check: since %v", got)
	}
	p.done(next, false)
	if got := p.since(); !got.Equal(at.Add(-slack)) {
		t.Fatalf("an incremental check cut short moved on to %v", got)
	}
}
