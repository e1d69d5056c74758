// Package queue holds the rules of the queue: what a submission must be
// (checked here, once), what a result does to a job, what an expired lease
// does to it, and how long a requeued job waits; and the queue as
// administrators use it (Service). The store applies what they decide;
// controlplane/maintenance applies the rules that run on a clock.
package queue

import (
	"fmt"
	"time"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// DefaultQuarantineAfter is how many host faults in a row quarantine a
// runner.
const DefaultQuarantineAfter = 3

// Backoff is how long a job given back (or whose lease expired) waits
// before it may be leased again: 2 s, doubling per attempt, at most 5 min.
func Backoff(attempt int) time.Duration {
	d := 2 * time.Second
	for i := 1; i < attempt && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// Decide maps an attempt's outcome to the job's next state.
func Decide(o record.Outcome, held store.HeldJob, now time.Time) store.Transition {
	switch {
	case held.CancelRequested:
		return store.Transition{State: record.JobCancelled, Reason: "cancelled while it ran"}
	case o.ExitCode != nil && o.OOM:
		return store.Transition{State: record.JobFailed, Reason: fmt.Sprintf("ran out of memory (exit code %d)", *o.ExitCode)}
	case o.ExitCode != nil && *o.ExitCode == 0:
		return store.Transition{State: record.JobSucceeded}
	case o.ExitCode != nil:
		return store.Transition{State: record.JobFailed, Reason: fmt.Sprintf("exited with code %d", *o.ExitCode)}
	}
	reason := "given back"
	if o.ReturnReason != nil {
		reason = *o.ReturnReason
	}
	if !o.HostFault {
		return store.Transition{State: record.JobFailed, Reason: reason}
	}
	// Tries, not attempt numbers: a lease that never reached a runner
	// (store.ReturnUndelivered) took a number but was no try.
	tries := held.Tries()
	t := store.Transition{Reason: "host fault: " + reason, CountsAsHostFault: tries == 1}
	if tries >= held.MaxAttempts {
		t.State = record.JobFailed
		t.Reason += fmt.Sprintf("; %d of %d attempts used", tries, held.MaxAttempts)
		return t
	}
	at := now.Add(Backoff(tries))
	t.State, t.AvailableAt = record.JobQueued, &at
	return t
}

// DecideExpiredLease maps a job whose lease ran out (its runner stopped
// heartbeating it) to its next state: back to the queue after the backoff
// of its tries, or FAILED once they are used up.
func DecideExpiredLease(j record.Job, now time.Time) store.Transition {
	reason := fmt.Sprintf("lease of attempt %d expired", j.Attempt)
	// Tries, not attempt numbers, as in Decide.
	tries := j.Tries()
	if tries >= j.MaxAttempts {
		return store.Transition{State: record.JobFailed, Reason: fmt.Sprintf("%s; %d of %d attempts used", reason, tries, j.MaxAttempts)}
	}
	at := now.Add(Backoff(tries))
	return store.Transition{State: record.JobQueued, Reason: reason, AvailableAt: &at}
}

// OutageCredit is the time every held lease gets back after a gap between
// two passes of the lease rescuer, which runs every pace on some replica:
// a gap much longer than that is time in which no replica could reach the
// database (or none ran), in which runners' heartbeats were answered
// "retry" or not at all. Their leases must not run out for it, so the gap
// (less the pace the rescuer would have waited anyway) is given back. A
// gap within twice the pace and a second is the ordinary jitter of
// passes and gets nothing.
func OutageCredit(gap, pace time.Duration) time.Duration {
	if gap <= 2*pace+time.Second {
		return 0
	}
	return gap - pace
}
