package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc"
)

// ErrStaleAttempt: the report names an attempt the runner no longer holds
// (a newer attempt began, or the lease ended). Nothing was changed.
var ErrStaleAttempt = errors.New("stale attempt")

// LeaseReport is one held lease as a heartbeat reports it.
type LeaseReport struct {
	LeaseID uuid.UUID `json:"lease_id"`
	Attempt int       `json:"attempt"`
	Phase   string    `json:"phase"` // STARTING or RUNNING
}

// HeldLease is a lease the server agrees the runner holds.
type HeldLease struct {
	JobID           uuid.UUID
	Attempt         int
	CancelRequested bool
}

// ExtendLeases extends the reported leases the runner still holds and
// returns those; the rest are gone.
func (s *Store) ExtendLeases(ctx context.Context, runnerID uuid.UUID, leaseSeconds int, reports []LeaseReport) ([]HeldLease, error) {
	doc, err := json.Marshal(reports)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ExtendLeases(ctx, s.conn(ctx), dbsqlc.ExtendLeasesParams{
		LeaseSeconds: int32(leaseSeconds), RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true}, Leases: doc,
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]HeldLease, len(rows))
	for i, r := range rows {
		out[i] = HeldLease{JobID: r.ID, Attempt: int(r.Attempt), CancelRequested: r.CancelRequested}
	}
	return out, nil
}

// Outcome is how an attempt ended, as its runner reports it.
type Outcome struct {
	JobID    uuid.UUID
	Attempt  int
	RunnerID uuid.UUID
	// ExitCode, when the job's process ran to an end; otherwise
	// ReturnReason says why the runner gives the job back.
	ExitCode      *int
	ReturnReason  *string
	HostFault     bool
	OOM           bool
	PeakMemoryMiB *int64
	ImageDigest   *string
	RunnerVersion *string
}

// Transition is what an outcome does to the job: its next state, why, and
// (for a requeue) when it may run again.
type Transition struct {
	State       JobState
	Reason      string
	AvailableAt *time.Time
	// CountsAsHostFault: a host fault on the job's first try, which counts
	// towards quarantining the runner (anything else resets the count).
	CountsAsHostFault bool
}

// FinishAttempt ends an attempt, fenced: only the runner holding the job at
// exactly this attempt may. decide maps the held job to its transition. It
// records the run, a job event, and the runner's failures in a row
// (quarantining it at quarantineAfter).
func (s *Store) FinishAttempt(ctx context.Context, o Outcome, quarantineAfter int, decide func(Job) Transition) (Job, error) {
	var out Job
	err := s.WithTx(ctx, func(ctx context.Context) error {
		current, err := s.q.GetJobForUpdate(ctx, s.conn(ctx), dbsqlc.GetJobForUpdateParams{ID: o.JobID, AllOrgs: true})
		if err != nil {
			return mapErr(err)
		}
		held := jobFromRow(current)
		if held.Attempt != o.Attempt || held.RunnerID == nil || *held.RunnerID != o.RunnerID || held.State.Finished() ||
			(held.State != JobLeased && held.State != JobRunning) {
			return ErrStaleAttempt
		}
		t := decide(held)
		row, err := s.q.FinishAttempt(ctx, s.conn(ctx), dbsqlc.FinishAttemptParams{
			State: string(t.State), StateReason: t.Reason, AvailableAt: t.AvailableAt,
			ID: o.JobID, Attempt: int32(o.Attempt), RunnerID: uuid.NullUUID{UUID: o.RunnerID, Valid: true},
		})
		if err != nil {
			if errors.Is(mapErr(err), ErrNotFound) {
				return ErrStaleAttempt
			}
			return mapErr(err)
		}
		out = jobFromRow(row)
		if err := s.q.RecordRunResult(ctx, s.conn(ctx), dbsqlc.RecordRunResultParams{
			JobID: o.JobID, Attempt: int32(o.Attempt), ExitCode: int32Ptr(o.ExitCode), ReturnReason: o.ReturnReason,
			HostFault: o.HostFault, Oom: o.OOM, PeakMemoryMib: o.PeakMemoryMiB, ImageDigest: o.ImageDigest, RunnerVersion: o.RunnerVersion,
		}); err != nil {
			return mapErr(err)
		}
		event := string(t.State)
		if t.State == JobQueued {
			event = "REQUEUED"
		}
		if err := s.jobEvent(ctx, o.JobID, event, o.Attempt, &o.RunnerID, t.Reason); err != nil {
			return err
		}
		if err := s.q.SetFailuresInARow(ctx, s.conn(ctx), dbsqlc.SetFailuresInARowParams{
			ID: o.RunnerID, HostFault: t.CountsAsHostFault, LimitFailures: int32(quarantineAfter),
		}); err != nil {
			return mapErr(err)
		}
		if t.CountsAsHostFault {
			// failuresInARow changed, and may have quarantined the runner.
			if err := s.q.NotifyRunnerStatus(ctx, s.conn(ctx), o.RunnerID.String()); err != nil {
				return mapErr(err)
			}
		}
		if t.State == JobQueued {
			s.notifyAfterCommit(ctx, ChannelJobs, out.PoolID.String())
		}
		return nil
	})
	return out, err
}

// AppendLog stores one chunk of an attempt's output, fenced like results.
// A chunk stored before (same sequence number) is not stored again.
func (s *Store) AppendLog(ctx context.Context, jobID uuid.UUID, attempt int, runnerID uuid.UUID, seq int, data []byte) error {
	return s.WithTx(ctx, func(ctx context.Context) error {
		held, err := s.q.HeldAttempt(ctx, s.conn(ctx), dbsqlc.HeldAttemptParams{
			ID: jobID, Attempt: int32(attempt), RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true},
		})
		if err != nil {
			return mapErr(err)
		}
		if !held {
			return ErrStaleAttempt
		}
		if _, err := s.q.InsertLogChunk(ctx, s.conn(ctx), dbsqlc.InsertLogChunkParams{JobID: jobID, Attempt: int32(attempt), Seq: int32(seq), Data: data}); err != nil {
			return mapErr(err)
		}
		s.notifyAfterCommit(ctx, ChannelJobChanges, jobID.String())
		return nil
	})
}

// LogChunk is one stored piece of output.
type LogChunk struct {
	Attempt int
	Seq     int
	Data    []byte
}

// JobLogs returns a job's output in order (by attempt, then sequence),
// from after the chunk (afterAttempt, afterSeq); (0, -1) is the start.
func (s *Store) JobLogs(ctx context.Context, jobID uuid.UUID, afterAttempt, afterSeq int) ([]LogChunk, error) {
	rows, err := s.q.JobLogs(ctx, s.conn(ctx), dbsqlc.JobLogsParams{JobID: jobID, AfterAttempt: int32(afterAttempt), AfterSeq: int32(afterSeq)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]LogChunk, len(rows))
	for i, r := range rows {
		out[i] = LogChunk{Attempt: int(r.Attempt), Seq: int(r.Seq), Data: r.Data}
	}
	return out, nil
}

// JobEvent is one recorded change of a job.
type JobEvent struct {
	ID       int64
	At       time.Time
	Type     string
	Attempt  int
	RunnerID *uuid.UUID
	Detail   string
}

// JobEvents lists a job's events in order, those after afterID (0: all).
func (s *Store) JobEvents(ctx context.Context, jobID uuid.UUID, afterID int64) ([]JobEvent, error) {
	rows, err := s.q.JobEvents(ctx, s.conn(ctx), dbsqlc.JobEventsParams{JobID: jobID, AfterID: afterID})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]JobEvent, len(rows))
	for i, r := range rows {
		out[i] = jobEventFromRow(r)
	}
	return out, nil
}

func jobEventFromRow(r dbsqlc.JobEvent) JobEvent {
	return JobEvent{ID: r.ID, At: r.At, Type: r.Type, Attempt: int(r.Attempt), RunnerID: uuidPtr(r.RunnerID), Detail: r.Detail}
}

// JobRun is one attempt: where it ran and how it ended.
type JobRun struct {
	Attempt       int
	RunnerID      uuid.UUID
	RunnerName    string
	LeasedAt      time.Time
	FinishedAt    *time.Time
	ExitCode      *int
	ReturnReason  *string
	HostFault     bool
	OOM           bool
	PeakMemoryMiB *int64
	ImageDigest   *string
	RunnerVersion *string
}

func jobRunFromRow(r dbsqlc.JobRun) JobRun {
	return JobRun{Attempt: int(r.Attempt), RunnerID: r.RunnerID, RunnerName: r.RunnerName, LeasedAt: r.LeasedAt,
		FinishedAt: r.FinishedAt, ExitCode: intPtr(r.ExitCode), ReturnReason: r.ReturnReason, HostFault: r.HostFault, OOM: r.Oom,
		PeakMemoryMiB: r.PeakMemoryMib, ImageDigest: r.ImageDigest, RunnerVersion: r.RunnerVersion}
}

// The ...ForJobs functions read several jobs' events, runs and logs in one
// statement each, for job lists. The caller has read the jobs through its
// scope; every id asked for gets an entry, empty when it has nothing.

// JobEventsForJobs returns each job's events, oldest first.
func (s *Store) JobEventsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]JobEvent, error) {
	rows, err := s.q.JobEventsForJobs(ctx, s.conn(ctx), ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobEvent) (uuid.UUID, JobEvent) { return r.JobID, jobEventFromRow(r) })
}

// JobRunsForJobs returns each job's runs by attempt.
func (s *Store) JobRunsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]JobRun, error) {
	rows, err := s.q.JobRunsForJobs(ctx, s.conn(ctx), ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobRun) (uuid.UUID, JobRun) { return r.JobID, jobRunFromRow(r) })
}

// JobLogsForJobs returns each job's output chunks in order.
func (s *Store) JobLogsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]LogChunk, error) {
	rows, err := s.q.JobLogsForJobs(ctx, s.conn(ctx), ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobLogsForJobsRow) (uuid.UUID, LogChunk) {
		return r.JobID, LogChunk{Attempt: int(r.Attempt), Seq: int(r.Seq), Data: r.Data}
	})
}

// byJob groups rows by job, in their order, with an empty list for every id
// that has none.
func byJob[R, T any](ids []uuid.UUID, rows []R, err error, conv func(R) (uuid.UUID, T)) (map[uuid.UUID][]T, error) {
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID][]T, len(ids))
	for _, id := range ids {
		out[id] = []T{}
	}
	for _, r := range rows {
		id, v := conv(r)
		out[id] = append(out[id], v)
	}
	return out, nil
}
