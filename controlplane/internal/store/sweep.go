package store

// The statements of the maintenance services (controlplane/maintenance),
// one duty each. Every row they take is locked with SKIP LOCKED, so the
// services of several replicas share the work instead of doing it twice.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// DefaultMaintenanceBatch is how many rows one maintenance statement takes
// at most when its caller names no batch.
const DefaultMaintenanceBatch = 500

func batchOr(max int) int32 {
	if max <= 0 {
		return DefaultMaintenanceBatch
	}
	return int32(max)
}

// ExpiredLeases returns up to max jobs whose lease ran out before now (nil:
// the database's clock), soonest expired first, locked until the
// transaction ends. Rows another transaction holds are skipped.
// What becomes of them is policy's to decide and RescueLeases' to apply, in
// the same transaction.
func (s *Tx) ExpiredLeases(ctx context.Context, now *time.Time, max int) ([]ExpiredLease, error) {
	rows, err := s.q.ExpiredLeases(ctx, s.db, dbsqlc.ExpiredLeasesParams{Now: now, MaxRows: batchOr(max)})
	if err != nil {
		return nil, fmt.Errorf("read expired leases: %w", mapErr(err))
	}
	leases := make([]ExpiredLease, len(rows))
	for i, row := range rows {
		leases[i] = ExpiredLease{Job: jobFromRow(row.Job), Unheard: row.Unheard}
	}
	return leases, nil
}

// ExpiredLease is a job whose lease ran out. Unheard: no heartbeat named
// the lease while its runner went on heartbeating, well past when the answer
// would have reached it; the runner never had it (the replica that
// granted it went down before the answer went out), and it is given back as
// not delivered rather than charged a try.
type ExpiredLease struct {
	record.Job
	Unheard bool
}

// LeaseRescue is what policy decided for a job ExpiredLeases returned: back
// to JobQueued at AvailableAt, or JobFailed.
type LeaseRescue struct {
	Job record.Job
	Transition
}

// RescuedLeases counts what a pass of the lease rescuer did: jobs requeued
// or failed by RescueLeases, and leases given back as never delivered.
type RescuedLeases struct{ Requeued, Failed, Undelivered int }

// RescueLeases applies rescues in the transaction whose ExpiredLeases
// locked their jobs: each attempt's run ends ("lease expired"), the job
// moves as decided with a LEASE_EXPIRED event (FAILED when it failed), and
// once committed the runners waiting on the pools of requeued jobs wake.
func (s *Tx) RescueLeases(ctx context.Context, rescues []LeaseRescue) (RescuedLeases, error) {
	var res RescuedLeases
	pools := map[uuid.UUID]bool{}
	for _, r := range rescues {
		j, t := r.Job, r.Transition
		if !(t.State == record.JobQueued && t.AvailableAt != nil || t.State == record.JobFailed) {
			return res, fmt.Errorf("rescue expired lease of job %s: %w: %s", j.ID, record.ErrInvalid, t.State)
		}
		detail := fmt.Sprintf("lease of attempt %d expired", j.Attempt)
		if err := s.q.EndExpiredRun(ctx, s.db, dbsqlc.EndExpiredRunParams{JobID: j.ID, Attempt: int32(j.Attempt)}); err != nil {
			return res, fmt.Errorf("end the run of job %s: %w", j.ID, mapErr(err))
		}
		if t.State == record.JobFailed {
			if err := s.q.SetJobState(ctx, s.db, dbsqlc.SetJobStateParams{ID: j.ID, State: string(record.JobFailed), StateReason: t.Reason}); err != nil {
				return res, fmt.Errorf("fail job %s: %w", j.ID, mapErr(err))
			}
			res.Failed++
			if err := s.jobEvent(ctx, j.ID, "FAILED", j.Attempt, j.RunnerID, detail); err != nil {
				return res, err
			}
			continue
		}
		if err := s.q.RequeueJob(ctx, s.db, dbsqlc.RequeueJobParams{ID: j.ID, StateReason: t.Reason, AvailableAt: *t.AvailableAt}); err != nil {
			return res, fmt.Errorf("requeue job %s: %w", j.ID, mapErr(err))
		}
		res.Requeued++
		pools[j.PoolID] = true
		s.wakeWhenAvailable(j.PoolID, t.AvailableAt)
		if err := s.jobEvent(ctx, j.ID, "LEASE_EXPIRED", j.Attempt, j.RunnerID, detail); err != nil {
			return res, err
		}
	}
	for p := range pools {
		s.notifyAfterCommit(ChannelJobs, p.String())
	}
	return res, nil
}

// ExpireTimedOut moves up to max waiting jobs (QUEUED or BLOCKED) past
// their pool's queue timeout in force (its own, or defaultHours) at now
// (nil: the database's clock) to EXPIRED, each with an EXPIRED event, in
// one transaction. It returns how many it expired.
func (s *Querier) ExpireTimedOut(ctx context.Context, now *time.Time, defaultHours, max int) (int, error) {
	n := 0
	err := s.atomically(ctx, func(tx *Tx) error {
		rows, err := tx.q.TimedOutJobs(ctx, tx.db, dbsqlc.TimedOutJobsParams{
			Now: now, DefaultQueueTimeoutHours: int32(defaultHours), MaxRows: batchOr(max)})
		if err != nil {
			return mapErr(err)
		}
		const reason = "waited longer than the pool's queue timeout"
		for _, row := range rows {
			if err := tx.q.SetJobState(ctx, tx.db, dbsqlc.SetJobStateParams{ID: row.ID, State: string(record.JobExpired), StateReason: reason}); err != nil {
				return mapErr(err)
			}
			n++
			if err := tx.jobEvent(ctx, row.ID, "EXPIRED", int(row.Attempt), nil, reason); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire timed-out jobs: %w", err)
	}
	return n, nil
}

// Blocked counts what BlockUnplaceable did.
type Blocked struct {
	Blocked int
	// Cut: it stopped at its batch size, and jobs it was asked to read are
	// left for the next check.
	Cut bool
}

// BlockUnplaceable moves up to max queued jobs that no approved runner of
// their pool could ever hold, even empty, to BLOCKED with the reason and a
// BLOCKED event, in one transaction. A zero since reads every queued job;
// otherwise only those submitted since then, along the primary key.
func (s *Querier) BlockUnplaceable(ctx context.Context, since time.Time, max int) (Blocked, error) {
	var res Blocked
	err := s.atomically(ctx, func(tx *Tx) error {
		rows, err := unplaceable(ctx, tx, since, batchOr(max))
		if err != nil {
			return mapErr(err)
		}
		res.Cut = len(rows) == int(batchOr(max))
		for _, u := range rows {
			row, reason := u.job, u.reason()
			if err := tx.q.SetJobState(ctx, tx.db, dbsqlc.SetJobStateParams{ID: row.ID, State: string(record.JobBlocked), StateReason: reason}); err != nil {
				return mapErr(err)
			}
			res.Blocked++
			if err := tx.jobEvent(ctx, row.ID, "BLOCKED", int(row.Attempt), nil, reason); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Blocked{}, fmt.Errorf("block unplaceable jobs: %w", err)
	}
	return res, nil
}

// unplaceableJob is a queued job no runner of its pool could ever hold,
// and which of the rules no runner passes.
type unplaceableJob struct {
	job        dbsqlc.Job
	kindOK     bool // some runner runs its kind
	selectorOK bool // one of those has the labels it selects
}

func unplaceable(ctx context.Context, tx *Tx, since time.Time, max int32) ([]unplaceableJob, error) {
	var out []unplaceableJob
	if since.IsZero() {
		rows, err := tx.q.Unplaceable(ctx, tx.db, max)
		for _, r := range rows {
			out = append(out, unplaceableJob{r.Job, r.KindOk, r.SelectorOk})
		}
		return out, err
	}
	rows, err := tx.q.UnplaceableSince(ctx, tx.db, dbsqlc.UnplaceableSinceParams{After: uuidV7Bound(since), MaxRows: max})
	for _, r := range rows {
		out = append(out, unplaceableJob{r.Job, r.KindOk, r.SelectorOk})
	}
	return out, err
}

// reason says why the job is BLOCKED: the first rule, in the claim's
// order, that no runner of its pool passes.
func (u unplaceableJob) reason() string {
	j := u.job
	var o record.JobOptions
	_ = json.Unmarshal(j.Options, &o) // NULL (no options) leaves it zero
	switch {
	case !u.kindOK:
		return fmt.Sprintf("no approved runner of the pool runs jobs of kind %q", j.Kind)
	case !u.selectorOK:
		return fmt.Sprintf("no approved runner of the pool that runs kind %q matches its selector %s",
			j.Kind, runnerapi.FormatSelector(o.Selector))
	}
	reason := fmt.Sprintf("no approved runner of the pool could ever hold %.4g cores, %d MiB and %d GPUs", j.Cores, j.MemoryMib, j.Gpus)
	if len(o.Selector) > 0 {
		reason += " and match its selector " + runnerapi.FormatSelector(o.Selector)
	}
	if j.MemoryMib > 0 {
		reason += " (a memory claim needs a runner that enforces memory limits, unless the pool allows otherwise)"
	}
	return reason
}

// UnblockPlaceable moves up to max BLOCKED jobs that some approved runner
// of their pool could now hold back to QUEUED, each with an UNBLOCKED
// event, in one transaction; once committed, the runners waiting on their
// pools wake. It returns how many it moved.
func (s *Querier) UnblockPlaceable(ctx context.Context, max int) (int, error) {
	n := 0
	err := s.atomically(ctx, func(tx *Tx) error {
		rows, err := tx.q.Unblockable(ctx, tx.db, batchOr(max))
		if err != nil {
			return mapErr(err)
		}
		now := time.Now()
		pools := map[uuid.UUID]bool{}
		for _, row := range rows {
			if err := tx.q.RequeueJob(ctx, tx.db, dbsqlc.RequeueJobParams{ID: row.ID, StateReason: "", AvailableAt: now}); err != nil {
				return mapErr(err)
			}
			n++
			pools[row.PoolID] = true
			if err := tx.jobEvent(ctx, row.ID, "UNBLOCKED", int(row.Attempt), nil, "a runner that could hold it is in the pool now"); err != nil {
				return err
			}
		}
		for p := range pools {
			tx.notifyAfterCommit(ChannelJobs, p.String())
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("unblock placeable jobs: %w", err)
	}
	return n, nil
}

// PruneJobs deletes up to max jobs that ended longer than keep ago (by the
// database's clock), with their events, runs and output, in one
// transaction. It walks jobs in id order after the id after (uuid.Nil: from
// the first) and returns how many it deleted and the id to go on after.
// Jobs still queued or held are never touched, however old.
func (s *Querier) PruneJobs(ctx context.Context, keep time.Duration, after uuid.UUID, max int) (int, uuid.UUID, error) {
	var n int
	last := after
	err := s.atomically(ctx, func(tx *Tx) error {
		// The ids are stamped by the clocks of the servers that took the
		// jobs, the cutoff by the database's: the hour of slack keeps a
		// skewed clock from hiding a job from the walk.
		ids, err := tx.q.PrunableJobs(ctx, tx.db, dbsqlc.PrunableJobsParams{
			After: after, Below: uuidV7Bound(time.Now().Add(-keep + time.Hour)), KeepSeconds: keep.Seconds(), MaxRows: int32(max)})
		if err != nil || len(ids) == 0 {
			return mapErr(err)
		}
		deleted, err := tx.q.DeleteJobs(ctx, tx.db, ids)
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
