package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
)

// An expired lease sends its job back with the backoff of its tries, until
// the last try, which fails it; leases that never reached a runner are no
// tries.
func TestAnExpiredLeaseRequeuesUntilTheLastTry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		attempt, undelivered, max int
		want                      record.JobState
		reason                    string
		wait                      time.Duration
	}{
		{attempt: 1, max: 3, want: record.JobQueued, reason: "lease of attempt 1 expired", wait: 2 * time.Second},
		{attempt: 2, max: 3, want: record.JobQueued, reason: "lease of attempt 2 expired", wait: 4 * time.Second},
		{attempt: 3, max: 3, want: record.JobFailed, reason: "lease of attempt 3 expired; 3 of 3 attempts used"},
		{attempt: 4, undelivered: 3, max: 3, want: record.JobQueued, reason: "lease of attempt 4 expired", wait: 2 * time.Second},
		{attempt: 1, max: 1, want: record.JobFailed, reason: "lease of attempt 1 expired; 1 of 1 attempts used"},
	} {
		got := queue.DecideExpiredLease(record.Job{Attempt: c.attempt, Undelivered: c.undelivered, MaxAttempts: c.max}, now)
		require.Equal(t, c.want, got.State, "%+v", c)
		require.Equal(t, c.reason, got.Reason, "%+v", c)
		if c.want == record.JobFailed {
			require.Nil(t, got.AvailableAt, "%+v", c)
			continue
		}
		require.NotNil(t, got.AvailableAt, "%+v", c)
		require.Equal(t, now.Add(c.wait), *got.AvailableAt, "%+v", c)
		require.Equal(t, queue.Backoff(c.attempt-c.undelivered), c.wait, "%+v", c)
	}
}

// What each outcome does to its job: exit codes end it, a reason given
// back without the host's fault fails it with that reason, and a host
// fault requeues it after the backoff until its last try, which fails it.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Now()
	zero, three := 0, 3
	reason := "the image could not be pulled"
	held := func(attempt, max int) store.HeldJob {
		return store.HeldJob{State: record.JobRunning, Attempt: attempt, MaxAttempts: max}
	}
	for _, c := range []struct {
		name   string
		o      record.Outcome
		h      store.HeldJob
		state  record.JobState
		reason string
	}{
		{"exit 0", record.Outcome{ExitCode: &zero}, held(1, 3), record.JobSucceeded, ""},
		{"exit 3", record.Outcome{ExitCode: &three}, held(1, 3), record.JobFailed, "exited with code 3"},
		{"out of memory", record.Outcome{ExitCode: &three, OOM: true}, held(1, 3), record.JobFailed, "ran out of memory (exit code 3)"},
		{"given back, not the host's fault", record.Outcome{ReturnReason: &reason}, held(1, 3), record.JobFailed, reason},
		{"given back without a reason", record.Outcome{}, held(1, 3), record.JobFailed, "given back"},
		{"a host fault before the last try", record.Outcome{ReturnReason: &reason, HostFault: true}, held(2, 3), record.JobQueued, "host fault: " + reason},
		{"a host fault on the last try", record.Outcome{ReturnReason: &reason, HostFault: true}, held(3, 3), record.JobFailed, "host fault: " + reason + "; 3 of 3 attempts used"},
		{"cancelled while it ran", record.Outcome{ExitCode: &zero}, store.HeldJob{State: record.JobRunning, Attempt: 1, MaxAttempts: 3, CancelRequested: true}, record.JobCancelled, "cancelled while it ran"},
	} {
		got := queue.Decide(c.o, c.h, now)
		require.Equal(t, c.state, got.State, c.name)
		require.Equal(t, c.reason, got.Reason, c.name)
		if c.state == record.JobQueued {
			require.Equal(t, now.Add(queue.Backoff(c.h.Attempt)), *got.AvailableAt, c.name)
		}
	}
}

// A gap between two passes of the lease rescuer within twice its pace and
// a second is jitter and gives nothing back; past it, the gap less the
// pace is given back to every held lease.
func TestOutageCredit(t *testing.T) {
	t.Parallel()
	const pace = 10 * time.Second
	for _, c := range []struct {
		gap, want time.Duration
	}{
		{pace, 0},
		{21 * time.Second, 0},
		{21*time.Second + time.Millisecond, 11*time.Second + time.Millisecond},
		{5 * time.Minute, 5*time.Minute - pace},
	} {
		require.Equal(t, c.want, queue.OutageCredit(c.gap, pace), "gap %s", c.gap)
	}
}

// Backoff doubles from 2 s per try and stops at 5 min.
func TestBackoff(t *testing.T) {
	t.Parallel()
	for try, want := range map[int]time.Duration{
		0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 8: 256 * time.Second,
		9: 5 * time.Minute, 10: 5 * time.Minute, 1000: 5 * time.Minute,
	} {
		require.Equal(t, want, queue.Backoff(try), "try %d", try)
	}
}
