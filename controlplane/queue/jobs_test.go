package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
)

// An expired lease sends its job back with the backoff of its tries, until
// the last try, which fails it; leases that never reached a runner are no
// tries.
func TestAnExpiredLeaseRequeuesUntilTheLastTry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		attempt, undelivered, max int
		want                      store.JobState
		reason                    string
		wait                      time.Duration
	}{
		{attempt: 1, max: 3, want: store.JobQueued, reason: "lease of attempt 1 expired", wait: 2 * time.Second},
		{attempt: 2, max: 3, want: store.JobQueued, reason: "lease of attempt 2 expired", wait: 4 * time.Second},
		{attempt: 3, max: 3, want: store.JobFailed, reason: "lease of attempt 3 expired; 3 of 3 attempts used"},
		{attempt: 4, undelivered: 3, max: 3, want: store.JobQueued, reason: "lease of attempt 4 expired", wait: 2 * time.Second},
		{attempt: 1, max: 1, want: store.JobFailed, reason: "lease of attempt 1 expired; 1 of 1 attempts used"},
	} {
		got := queue.DecideExpiredLease(store.Job{Attempt: c.attempt, Undelivered: c.undelivered, MaxAttempts: c.max}, now)
		require.Equal(t, c.want, got.State, "%+v", c)
		require.Equal(t, c.reason, got.Reason, "%+v", c)
		if c.want == store.JobFailed {
			require.Nil(t, got.AvailableAt, "%+v", c)
			continue
		}
		require.NotNil(t, got.AvailableAt, "%+v", c)
		require.Equal(t, now.Add(c.wait), *got.AvailableAt, "%+v", c)
		require.Equal(t, queue.Backoff(c.attempt-c.undelivered), c.wait, "%+v", c)
	}
}
