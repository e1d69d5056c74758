package queue

import (
	"context"
	"testing"
	"time"
)

// A long-poll claims again only when its own pool may have work: a
// notification about another pool keeps it waiting.
func TestWaitForWorkIgnoresOtherPools(t *testing.T) {
	t.Parallel()
	const pool = "11111111-1111-4111-8111-111111111111"
	notes := make(chan string, 8)
	never := make(chan time.Time)
	result := make(chan int, 1)
	go func() { result <- waitForWork(context.Background(), notes, never, pool) }()
	for range 5 {
		notes <- "22222222-2222-4222-8222-222222222222"
	}
	select {
	case r := <-result:
		t.Fatalf("the wait ended (%d) on another pool's work", r)
	case <-time.After(100 * time.Millisecond):
	}
	notes <- pool
	if r := <-result; r != waitWork {
		t.Fatalf("own pool: %d, want waitWork", r)
	}

	// An empty notification (a listener that reconnected) may hide work.
	notes <- ""
	if r := waitForWork(context.Background(), notes, never, pool); r != waitWork {
		t.Fatalf("empty: %d, want waitWork", r)
	}
	expired := make(chan time.Time, 1)
	expired <- time.Now()
	if r := waitForWork(context.Background(), make(chan string), expired, pool); r != waitTimedOut {
		t.Fatalf("deadline: %d, want waitTimedOut", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := waitForWork(ctx, make(chan string), never, pool); r != waitGone {
		t.Fatalf("request gone: %d, want waitGone", r)
	}
}
