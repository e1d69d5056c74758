package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func holdFromRow(r dbsqlc.GpuHold) record.Hold {
	return record.Hold{ID: r.ID, RunnerID: r.RunnerID, GPUs: int(r.Gpus), Reason: r.Reason, Until: r.Until,
		CreatedBy: uuidPtr(r.CreatedBy), CreatedAt: r.CreatedAt, ReleasedAt: r.ReleasedAt}
}

// CreateHold holds gpus GPUs of a runner inside scope. If the runner waits
// for work, it waits with less room now: its wait ends (StopWaiting), and
// it records the room it has at its next claim.
func (s *Querier) CreateHold(ctx context.Context, scope record.Scope, runnerID uuid.UUID, gpus int, reason string, until time.Time, by *uuid.UUID) (record.Hold, error) {
	var out record.Hold
	err := s.atomically(ctx, func(tx *Tx) error {
		if _, err := tx.Runner(ctx, scope, runnerID); err != nil {
			return err
		}
		row, err := tx.q.CreateHold(ctx, tx.db, dbsqlc.CreateHoldParams{RunnerID: runnerID, Gpus: int32(gpus), Reason: reason, Until: until, CreatedBy: nullUUID(by)})
		if err != nil {
			return mapErr(err)
		}
		out = holdFromRow(row)
		return tx.StopWaiting(ctx, runnerID)
	})
	if err != nil {
		return record.Hold{}, err
	}
	return out, nil
}

// ReleaseHold ends a hold on a runner inside scope.
func (s *Querier) ReleaseHold(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Hold, error) {
	var out record.Hold
	err := s.atomically(ctx, func(tx *Tx) error {
		h, err := tx.q.GetHold(ctx, tx.db, id)
		if err != nil {
			return mapErr(err)
		}
		if _, err := tx.Runner(ctx, scope, h.RunnerID); err != nil {
			return err
		}
		row, err := tx.q.ReleaseHold(ctx, tx.db, id)
		if err != nil {
			return mapErr(err)
		}
		out = holdFromRow(row)
		r, err := tx.Runner(ctx, scope, h.RunnerID)
		if err != nil {
			return err
		}
		tx.notifyAfterCommit(ChannelJobs, r.PoolID.String())
		return nil
	})
	return out, err
}

// Bookings loads several runners' bookings at once (for dataloaders).
func (s *Querier) Bookings(ctx context.Context, runnerIDs []uuid.UUID) (map[uuid.UUID]record.Booking, error) {
	rows, err := s.q.RunnerBookings(ctx, s.db, runnerIDs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Booking, len(rows))
	for _, r := range rows {
		out[r.RunnerID] = record.Booking{Cores: r.Cores, MemoryMiB: r.MemoryMib, GPUs: int(r.Gpus), HeldGPUs: int(r.HeldGpus)}
	}
	return out, nil
}

// PoolQueues loads several pools' queues at once (for dataloaders).
func (s *Querier) PoolQueues(ctx context.Context, poolIDs []uuid.UUID) (map[uuid.UUID]record.PoolQueue, error) {
	rows, err := s.q.PoolQueues(ctx, s.db, poolIDs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.PoolQueue, len(rows))
	for _, r := range rows {
		out[r.PoolID] = record.PoolQueue{Queued: r.Queued, HeldGPUs: r.HeldGpus}
	}
	return out, nil
}

// PoolJobs is one pool's unfinished jobs by state and its GPUs under holds
// (what /metrics shows per pool); or, with Submitted, the unfinished jobs
// an organisation submitted to a platform pool, attributed to it.
type PoolJobs struct {
	Organisation, Pool string
	// Jobs counts QUEUED, BLOCKED, LEASED and RUNNING jobs; every one of
	// those states is present, at zero if need be.
	Jobs     map[record.JobState]int64
	HeldGPUs int64
	// Submitted: Organisation's jobs in the platform pool Pool; the pool's
	// held GPUs are on its own entry.
	Submitted bool
}

// unfinishedStates are the states a job is in until it ends.
var unfinishedStates = []record.JobState{record.JobQueued, record.JobBlocked, record.JobLeased, record.JobRunning}

// PoolJobCounts reports every pool's unfinished jobs and held GPUs. It reads
// only the indexes of unfinished jobs, however many finished ones are kept.
func (s *Querier) PoolJobCounts(ctx context.Context) ([]PoolJobs, error) {
	pools, err := s.q.PoolsForMetrics(ctx, s.db)
	if err != nil {
		return nil, mapErr(err)
	}
	counts, err := s.q.UnfinishedJobCounts(ctx, s.db)
	if err != nil {
		return nil, mapErr(err)
	}
	byPool := make(map[uuid.UUID]*PoolJobs, len(pools))
	out := make([]PoolJobs, len(pools))
	for i, p := range pools {
		out[i] = PoolJobs{Organisation: p.Organisation, Pool: p.Name, Jobs: make(map[record.JobState]int64, len(unfinishedStates)), HeldGPUs: p.HeldGpus}
		for _, st := range unfinishedStates {
			out[i].Jobs[st] = 0
		}
		byPool[p.ID] = &out[i]
	}
	type submitted struct {
		pool uuid.UUID
		org  string
	}
	bySubmitter := map[submitted]int{}
	for _, c := range counts {
		p := byPool[c.PoolID]
		if p == nil {
			continue // a pool created since the first read waits for the next scrape
		}
		if c.Submitter == "" {
			p.Jobs[record.JobState(c.State)] = c.Jobs
			continue
		}
		k := submitted{c.PoolID, c.Submitter}
		i, ok := bySubmitter[k]
		if !ok {
			i = len(out)
			bySubmitter[k] = i
			out = append(out, PoolJobs{Organisation: c.Submitter, Pool: p.Pool, Jobs: make(map[record.JobState]int64, len(unfinishedStates)), Submitted: true})
			for _, st := range unfinishedStates {
				out[i].Jobs[st] = 0
			}
		}
		out[i].Jobs[record.JobState(c.State)] = c.Jobs
	}
	return out, nil
}
