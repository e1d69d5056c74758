package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc"
)

// SweepOptions are the rules one sweep applies.
type SweepOptions struct {
	Now                      *time.Time // nil: the database's clock
	DefaultQueueTimeoutHours int
	// Backoff is how long a job whose lease expired waits before it may be
	// leased again, given the tries it has had (Job.Tries).
	Backoff func(attempt int) time.Duration
	Batch   int
	// LeasesOnly skips the queue-timeout and blocked checks: their rules
	// work in hours and minutes, so they need not run at every pass, while
	// expired leases do.
	LeasesOnly bool
	// SkipTimeouts leaves out the queue-timeout check, which reads the
	// whole queue: its rule works in hours, so once a minute is enough.
	SkipTimeouts bool
	// UnplaceableSince, when set, limits the blocked check to jobs
	// submitted since then (read along the primary key); zero checks every
	// queued job, which reads the whole queue.
	UnplaceableSince time.Time
}

// defaultSweepBatch is how many rows of each kind one sweep takes at most.
const defaultSweepBatch = 500

// SweepResult counts what a sweep did.
type SweepResult struct {
	Requeued, Failed, Expired, Blocked, Unblocked int
	// BlockedCut: the blocked check stopped at its batch size, and jobs
	// it was asked to read are left for the next sweep.
	BlockedCut bool
}

// Sweep applies the queue's time rules once, in one transaction: expired
// leases go back to QUEUED with backoff (FAILED after maxAttempts), jobs
// past their pool's queue timeout become EXPIRED, jobs no approved runner
// of their pool could ever hold become BLOCKED (and come back when one
// could). Every row it takes is locked with SKIP LOCKED, so sweepers of
// several replicas share the work instead of doing it twice.
func (s *Store) Sweep(ctx context.Context, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	if o.Batch == 0 {
		o.Batch = defaultSweepBatch
	}
	err := s.WithTx(ctx, func(ctx context.Context) error {
		now := time.Now()
		if o.Now != nil {
			now = *o.Now
		}
		pools := map[uuid.UUID]bool{}
		expired, err := s.q.ExpiredLeases(ctx, s.conn(ctx), dbsqlc.ExpiredLeasesParams{Now: o.Now, MaxRows: int32(o.Batch)})
		if err != nil {
			return mapErr(err)
		}
		for _, row := range expired {
			j := jobFromRow(row)
			reason := fmt.Sprintf("lease of attempt %d expired", j.Attempt)
			if err := s.q.EndExpiredRun(ctx, s.conn(ctx), dbsqlc.EndExpiredRunParams{JobID: j.ID, Attempt: int32(j.Attempt)}); err != nil {
				return mapErr(err)
			}
			if j.Tries() >= j.MaxAttempts {
				if err := s.q.SetJobState(ctx, s.conn(ctx), dbsqlc.SetJobStateParams{ID: j.ID, State: string(JobFailed),
					StateReason: fmt.Sprintf("%s; %d of %d attempts used", reason, j.Tries(), j.MaxAttempts)}); err != nil {
					return mapErr(err)
				}
				res.Failed++
				if err := s.jobEvent(ctx, j.ID, "FAILED", j.Attempt, j.RunnerID, reason); err != nil {
					return err
				}
				continue
			}
			if err := s.q.RequeueJob(ctx, s.conn(ctx), dbsqlc.RequeueJobParams{ID: j.ID, StateReason: reason, AvailableAt: now.Add(o.Backoff(j.Tries()))}); err != nil {
				return mapErr(err)
			}
			res.Requeued++
			pools[j.PoolID] = true
			if err := s.jobEvent(ctx, j.ID, "LEASE_EXPIRED", j.Attempt, j.RunnerID, reason); err != nil {
				return err
			}
		}

		if o.LeasesOnly {
			for p := range pools {
				s.notifyAfterCommit(ctx, ChannelJobs, p.String())
			}
			return nil
		}
		var timedOut []dbsqlc.Job
		if !o.SkipTimeouts {
			timedOut, err = s.q.TimedOutJobs(ctx, s.conn(ctx), dbsqlc.TimedOutJobsParams{
				Now: o.Now, DefaultQueueTimeoutHours: int32(o.DefaultQueueTimeoutHours), MaxRows: int32(o.Batch)})
			if err != nil {
				return mapErr(err)
			}
		}
		for _, row := range timedOut {
			reason := "waited longer than the pool's queue timeout"
			if err := s.q.SetJobState(ctx, s.conn(ctx), dbsqlc.SetJobStateParams{ID: row.ID, State: string(JobExpired), StateReason: reason}); err != nil {
				return mapErr(err)
			}
			res.Expired++
			if err := s.jobEvent(ctx, row.ID, "EXPIRED", int(row.Attempt), nil, reason); err != nil {
				return err
			}
		}

		var unplaceable []dbsqlc.Job
		if o.UnplaceableSince.IsZero() {
			unplaceable, err = s.q.Unplaceable(ctx, s.conn(ctx), int32(o.Batch))
		} else {
			unplaceable, err = s.q.UnplaceableSince(ctx, s.conn(ctx), dbsqlc.UnplaceableSinceParams{
				After: uuidV7Bound(o.UnplaceableSince), MaxRows: int32(o.Batch)})
		}
		if err != nil {
			return mapErr(err)
		}
		res.BlockedCut = len(unplaceable) == o.Batch
		for _, row := range unplaceable {
			reason := fmt.Sprintf("no approved runner of the pool could ever hold %.4g cores, %d MiB and %d GPUs", row.Cores, row.MemoryMib, row.Gpus)
			if row.MemoryMib > 0 {
				reason += " (a memory claim needs a runner that enforces memory limits, unless the pool allows otherwise)"
			}
			if err := s.q.SetJobState(ctx, s.conn(ctx), dbsqlc.SetJobStateParams{ID: row.ID, State: string(JobBlocked), StateReason: reason}); err != nil {
				return mapErr(err)
			}
			res.Blocked++
			if err := s.jobEvent(ctx, row.ID, "BLOCKED", int(row.Attempt), nil, reason); err != nil {
				return err
			}
		}
		unblockable, err := s.q.Unblockable(ctx, s.conn(ctx), int32(o.Batch))
		if err != nil {
			return mapErr(err)
		}
		for _, row := range unblockable {
			if err := s.q.RequeueJob(ctx, s.conn(ctx), dbsqlc.RequeueJobParams{ID: row.ID, StateReason: "", AvailableAt: now}); err != nil {
				return mapErr(err)
			}
			res.Unblocked++
			pools[row.PoolID] = true
			if err := s.jobEvent(ctx, row.ID, "UNBLOCKED", int(row.Attempt), nil, "a runner that could hold it was approved"); err != nil {
				return err
			}
		}
		for p := range pools {
			s.notifyAfterCommit(ctx, ChannelJobs, p.String())
		}
		return nil
	})
	return res, err
}

// PruneJobs deletes up to max jobs that ended longer than keep ago (by the
// database's clock), with their events, runs and output, in one
// transaction. It walks jobs in id order after the id after (uuid.Nil: from
// the first) and returns how many it deleted and the id to go on after.
// Jobs still queued or held are never touched, however old.
func (s *Store) PruneJobs(ctx context.Context, keep time.Duration, after uuid.UUID, max int) (int, uuid.UUID, error) {
	var n int
	last := after
	err := s.WithTx(ctx, func(ctx context.Context) error {
		// The ids are stamped by the clocks of the servers that took the
		// jobs, the cutoff by the database's: the hour of slack keeps a
		// skewed clock from hiding a job from the walk.
		ids, err := s.q.PrunableJobs(ctx, s.conn(ctx), dbsqlc.PrunableJobsParams{
			After: after, Below: uuidV7Bound(time.Now().Add(-keep + time.Hour)), KeepSeconds: keep.Seconds(), MaxRows: int32(max)})
		if err != nil || len(ids) == 0 {
			return mapErr(err)
		}
		deleted, err := s.q.DeleteJobs(ctx, s.conn(ctx), ids)
		n, last = int(deleted), ids[len(ids)-1]
		return mapErr(err)
	})
	return n, last, err
}

// uuidV7Bound is a lower bound of the UUIDv7s of the millisecond t (its
// time, and zeros where they have their version and random bits): every
// job submitted before t has a smaller id.
func uuidV7Bound(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (8 * (5 - i)))
	}
	return u
}
