package queue

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Service is the queue as administrators see it: submitting, reading and
// cancelling jobs, their events, runs and output, and holds on GPUs.
type Service struct {
	st       *store.Store
	listener *store.Listener
	// HasStorage: the server has object storage, so jobs may name its
	// keys as inputs and outputs.
	HasStorage bool
}

// NewService is the queue over st; listener wakes WatchJob (nil: none, and
// WatchJob must not be called).
func NewService(st *store.Store, listener *store.Listener) *Service {
	return &Service{st: st, listener: listener}
}

// Job is one job inside scope, or record.ErrNotFound.
func (s *Service) Job(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Job, error) {
	return s.st.Job(ctx, scope, id)
}

// Jobs lists a page of the jobs inside scope that match f, newest first.
func (s *Service) Jobs(ctx context.Context, scope record.Scope, f record.JobFilter, p record.Page) ([]record.Job, error) {
	return s.st.Jobs(ctx, scope, f, p)
}

// Runs lists a page of the ended attempts of the jobs inside scope that
// match f, newest first.
func (s *Service) Runs(ctx context.Context, scope record.Scope, f record.RunFilter, p record.Page) ([]record.JobRun, error) {
	return s.st.Runs(ctx, scope, f, p)
}

// HoldsOfRunners returns each runner's holds, newest first (those in
// force, or all with includeEnded), for runners the caller has read
// through its scope.
func (s *Service) HoldsOfRunners(ctx context.Context, ids []uuid.UUID, includeEnded bool) (map[uuid.UUID][]record.Hold, error) {
	return s.st.HoldsOfRunners(ctx, ids, includeEnded)
}

// HoldsOfPools returns the holds in force on each pool's runners, for
// pools the caller has read through its scope (for dataloaders).
func (s *Service) HoldsOfPools(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.Hold, error) {
	return s.st.HoldsOfPools(ctx, ids)
}

// Cancel cancels a queued job at once; a leased or running one is asked to
// stop, and is CANCELLED when its runner reports back.
func (s *Service) Cancel(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Job, error) {
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.Job, error) { return tx.CancelJob(ctx, scope, id) })
}

// The reads below take jobs the caller has already read through its
// scope (Job, Jobs).

// Events lists a job's events in order, those after afterID (0: all).
func (s *Service) Events(ctx context.Context, jobID uuid.UUID, afterID int64) ([]record.JobEvent, error) {
	return s.st.JobEvents(ctx, jobID, afterID)
}

// Logs returns a job's output in order, from after the chunk (afterAttempt,
// afterSeq) ((0, -1) is the start), at most max chunks.
func (s *Service) Logs(ctx context.Context, jobID uuid.UUID, afterAttempt, afterSeq, max int) ([]record.LogChunk, error) {
	return s.st.JobLogs(ctx, jobID, afterAttempt, afterSeq, max)
}

// EventsOfJobs returns each job's events, oldest first, every id with an
// entry (for dataloaders).
func (s *Service) EventsOfJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobEvent, error) {
	return s.st.JobEventsForJobs(ctx, ids)
}

// RunsOfJobs returns each job's runs by attempt, every id with an entry.
func (s *Service) RunsOfJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobRun, error) {
	return s.st.JobRunsForJobs(ctx, ids)
}

// OutputOfJobs returns the end of each job's output: the chunks that hold
// its last tailBytes (whole chunks, so up to one chunk more).
func (s *Service) OutputOfJobs(ctx context.Context, ids []uuid.UUID, tailBytes int64) (map[uuid.UUID]record.JobOutput, error) {
	return s.st.JobLogsForJobs(ctx, ids, tailBytes)
}

// PoolQueues is each pool's queue depth and held GPUs, for pools the
// caller has read through its scope.
func (s *Service) PoolQueues(ctx context.Context, poolIDs []uuid.UUID) (map[uuid.UUID]record.PoolQueue, error) {
	return s.st.PoolQueues(ctx, poolIDs)
}

// Bounds of a hold.
const (
	MaxHoldGPUs            = 64
	MinHoldFor, MaxHoldFor = time.Minute, 90 * 24 * time.Hour
)

// Hold keeps gpus GPUs of a runner inside scope free of new work for d
// (or until its release). Values out of bounds are a *record.InputError.
func (s *Service) Hold(ctx context.Context, scope record.Scope, runnerID uuid.UUID, gpus int, reason string, d time.Duration, by *uuid.UUID) (record.Hold, error) {
	switch {
	case gpus < 1 || gpus > MaxHoldGPUs:
		return record.Hold{}, record.Invalidf("gpus: 1 to %d", MaxHoldGPUs)
	case d < MinHoldFor || d > MaxHoldFor:
		return record.Hold{}, record.Invalidf("durationSeconds: between %d and %d", int(MinHoldFor.Seconds()), int(MaxHoldFor.Seconds()))
	}
	if err := record.CheckReason(reason); err != nil {
		return record.Hold{}, err
	}
	until := time.Now().Add(d)
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.Hold, error) {
		return tx.CreateHold(ctx, scope, runnerID, gpus, reason, until, by)
	})
}

// Release ends a hold on a runner inside scope.
func (s *Service) Release(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Hold, error) {
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.Hold, error) { return tx.ReleaseHold(ctx, scope, id) })
}

// JobsByID loads several jobs at once (for dataloaders); ids outside scope
// are absent from the result.
func (s *Service) JobsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Job, error) {
	return s.st.JobsByID(ctx, scope, ids)
}

// OpenSession records a person's session on a job as it opens (never its
// bytes); EndSession records its end.
func (s *Service) OpenSession(ctx context.Context, js record.JobSession) error {
	return s.st.OpenJobSession(ctx, js)
}

// EndSession records a session's end: bytes each way, and how it ended.
func (s *Service) EndSession(ctx context.Context, id uuid.UUID, bytesIn, bytesOut int64, endCode string) error {
	return s.st.EndJobSession(ctx, id, bytesIn, bytesOut, endCode)
}

// SessionsOfJobs returns each job's sessions, every id with an entry.
func (s *Service) SessionsOfJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobSession, error) {
	return s.st.JobSessionsForJobs(ctx, ids)
}
