// Package queue holds the rules of the queue: what a result does to a job,
// how long a requeued job waits, and the sweeper that applies the queue's
// time rules for the life of every server process.
package queue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store"
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
func Decide(o store.Outcome, held store.HeldJob, now time.Time) store.Transition {
	switch {
	case held.CancelRequested:
		return store.Transition{State: store.JobCancelled, Reason: "cancelled while it ran"}
	case o.ExitCode != nil && o.OOM:
		return store.Transition{State: store.JobFailed, Reason: fmt.Sprintf("ran out of memory (exit code %d)", *o.ExitCode)}
	case o.ExitCode != nil && *o.ExitCode == 0:
		return store.Transition{State: store.JobSucceeded}
	case o.ExitCode != nil:
		return store.Transition{State: store.JobFailed, Reason: fmt.Sprintf("exited with code %d", *o.ExitCode)}
	}
	reason := "given back"
	if o.ReturnReason != nil {
		reason = *o.ReturnReason
	}
	if !o.HostFault {
		return store.Transition{State: store.JobFailed, Reason: reason}
	}
	// Tries, not attempt numbers: a lease that never reached a runner
	// (store.ReturnUndelivered) took a number but was no try.
	tries := held.Tries()
	t := store.Transition{Reason: "host fault: " + reason, CountsAsHostFault: tries == 1}
	if tries >= held.MaxAttempts {
		t.State = store.JobFailed
		t.Reason += fmt.Sprintf("; %d of %d attempts used", tries, held.MaxAttempts)
		return t
	}
	at := now.Add(Backoff(tries))
	t.State, t.AvailableAt = store.JobQueued, &at
	return t
}

// Sweeper applies the queue's time rules every Interval until stopped.
// Every replica runs one; SKIP LOCKED in the sweep lets them share the work.
type Sweeper struct {
	Store                    *store.Store
	Log                      *slog.Logger
	Interval                 time.Duration
	DefaultQueueTimeoutHours int
	// Retention is how long a finished job is kept, with its events, runs
	// and output (0: DefaultRetention).
	Retention time.Duration
	// AlsoPrune are other retention passes (the server's certificates and
	// audit log), run after the jobs' at the same pace.
	AlsoPrune []func(context.Context)
}

// DefaultRetention keeps finished jobs 90 days.
const DefaultRetention = 90 * 24 * time.Hour

// fullSweepEvery: one pass in this many also checks blocked jobs (and,
// every timeoutsEvery of those, queue timeouts); expired leases, which are
// indexed, are swept at every pass.
const fullSweepEvery = 10

// timeoutsEvery: one full sweep in this many also checks queue timeouts
// (once a minute at the default interval). That check reads the whole
// queue, and its rule works in hours.
const timeoutsEvery = 6

// Pruning runs beside the sweep, every fullSweepEvery intervals: deleting
// a backlog of finished jobs never delays the requeueing of expired leases.
// Each batch is a transaction of its own (a job may carry up to 64 MiB of
// output per attempt), and a pass stops after pruneBudget, leaving the
// rest to the next one.
const (
	pruneBatch  = 500
	pruneBudget = 2 * time.Second
)

// Run sweeps, and prunes, until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	var pruning sync.WaitGroup
	defer pruning.Wait()
	pruning.Go(func() { s.pruneEvery(ctx, fullSweepEvery*s.Interval) })
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	var placeability placeabilityChecks
	for pass := 0; ; pass++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		opts := store.SweepOptions{DefaultQueueTimeoutHours: s.DefaultQueueTimeoutHours, Backoff: Backoff,
			LeasesOnly: pass%fullSweepEvery != 0, SkipTimeouts: pass%(fullSweepEvery*timeoutsEvery) != 0}
		start := time.Now()
		if !opts.LeasesOnly {
			opts.UnplaceableSince = placeability.since()
		}
		res, err := s.Store.Sweep(ctx, opts)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Error("sweep", "err", err)
			}
			continue
		}
		if !opts.LeasesOnly {
			placeability.done(start, !res.BlockedCut)
		}
		if res != (store.SweepResult{}) {
			s.Log.Info("swept", "requeued", res.Requeued, "failed", res.Failed, "expired", res.Expired, "blocked", res.Blocked, "unblocked", res.Unblocked)
		}
	}
}

// placeabilityChecks paces the blocked check. Reading every queued job
// costs in proportion to the queue, so most full sweeps read only the jobs
// submitted since the last check, and every wholeEvery one reads them all:
// a job already queued can become unplaceable only when the fleet shrinks,
// which that catches within minutes.
type placeabilityChecks struct {
	checkedBefore time.Time // jobs submitted before this have been checked
	sinceWhole    int
}

// wholeEvery: one blocked check in this many reads the whole queue (every
// 5 minutes at the default interval).
const wholeEvery = 30

// slack covers a submission whose transaction was still open when a check
// began, and clocks that disagree by less.
const slack = time.Minute

// wholeDue reports whether the next check reads the whole queue.
func (p *placeabilityChecks) wholeDue() bool {
	return p.checkedBefore.IsZero() || p.sinceWhole >= wholeEvery
}

// since is where the next check begins (zero: everything).
func (p *placeabilityChecks) since() time.Time {
	if p.wholeDue() {
		return time.Time{}
	}
	return p.checkedBefore
}

// done records a check that began at start and succeeded; complete is
// false when it stopped at its batch size and left jobs unread.
func (p *placeabilityChecks) done(start time.Time, complete bool) {
	if !complete {
		return
	}
	if p.wholeDue() {
		p.sinceWhole = 0
	}
	p.sinceWhole++
	p.checkedBefore = start.Add(-slack)
}

// pruneEvery prunes at once, then every interval, until ctx ends.
func (s *Sweeper) pruneEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.prune(ctx)
		for _, prune := range s.AlsoPrune {
			prune(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prune deletes jobs that ended longer ago than the retention, batch by
// batch, for at most pruneBudget.
func (s *Sweeper) prune(ctx context.Context) {
	keep := s.Retention
	if keep == 0 {
		keep = DefaultRetention
	}
	start, total, after := time.Now(), 0, uuid.Nil
	for {
		n, last, err := s.Store.PruneJobs(ctx, keep, after, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Error("pruning finished jobs", "err", err)
			}
			return
		}
		total, after = total+n, last
		if n < pruneBatch {
			break
		}
		if time.Since(start) > pruneBudget {
			s.Log.Warn("finished jobs past their retention remain; pruning goes on at the next pass", "pruned", total)
			return
		}
	}
	if total > 0 {
		s.Log.Info("pruned finished jobs", "jobs", total, "retention", keep.String())
	}
}
