package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Transition is what an outcome does to the job: its next state, why, and
// (for a requeue) when it may run again.
type Transition struct {
	State       record.JobState
	Reason      string
	AvailableAt *time.Time
	// CountsAsHostFault: a host fault on the job's first try, which counts
	// towards quarantining the runner (anything else resets the count).
	CountsAsHostFault bool
}

// HeldJob is what ending an attempt reads of its job: what the fence and
// the decision rest on.
type HeldJob struct {
	ID              uuid.UUID
	State           record.JobState
	Attempt         int
	Undelivered     int // see Job
	MaxAttempts     int
	RunnerID        *uuid.UUID
	CancelRequested bool
}

// Tries is how many attempts reached a runner (see Job.Tries).
func (j HeldJob) Tries() int { return record.Tries(j.Attempt, j.Undelivered) }

func heldFromRow(r dbsqlc.ReadJobsRow) HeldJob {
	return HeldJob{
		ID: r.ID, State: record.JobState(r.State), Attempt: int(r.Attempt), Undelivered: int(r.Undelivered),
		MaxAttempts: int(r.MaxAttempts), RunnerID: uuidPtr(r.RunnerID), CancelRequested: r.CancelRequested,
	}
}

// ReadHeldJobs reads what ending attempts of the jobs rests on. Planned
// for index scans only, as claims are (see ClaimJobs): the jobs are found
// by their ids.
func (s *Querier) ReadHeldJobs(ctx context.Context, ids []uuid.UUID) ([]HeldJob, error) {
	rows, err := s.q.ReadJobs(ctx, s.indexScansOnly(ctx), ids)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]HeldJob, len(rows))
	for i, r := range rows {
		out[i] = heldFromRow(r)
	}
	return out, nil
}

// LockJobs locks the jobs' rows until the transaction ends, so that
// what is read of them next stays true until then. Ids in a sorted order
// keep two lockers from deadlocking.
func (s *Tx) LockJobs(ctx context.Context, ids []uuid.UUID) error {
	return mapErr(s.q.LockJobs(ctx, s.indexScansOnly(ctx), ids))
}

// Ending is a decided outcome: the attempt's outcome, the transition
// decided for it, and the cancel request it was decided on. It is applied
// only while the job is still as decided on (see EndAttempts).
type Ending struct {
	Outcome         record.Outcome
	Transition      Transition
	CancelRequested bool
}

// EndedJob is a job whose attempt EndAttempts ended.
type EndedJob struct {
	State  record.JobState
	PoolID uuid.UUID
}

// EndAttempts applies decided endings of the runner's attempts in one
// statement, fenced and guarded: an ending applies only while its job is
// held by the runner at exactly its attempt, and is still as it was
// decided on (a cancel requested since, or an expiry, leaves it untouched).
// Each ending applied records its run and a job event. It returns the jobs
// ended, by id; an ending not among them was not applied.
func (s *Querier) EndAttempts(ctx context.Context, runnerID uuid.UUID, endings []Ending) (map[uuid.UUID]EndedJob, error) {
	if len(endings) == 0 {
		return map[uuid.UUID]EndedJob{}, nil
	}
	var p finishParams
	var availableAt map[uuid.UUID]*time.Time // backoffs only: most endings have none
	for _, e := range endings {
		p.add(e.Outcome, e.Transition, e.CancelRequested)
		if e.Transition.AvailableAt != nil {
			if availableAt == nil {
				availableAt = map[uuid.UUID]*time.Time{}
			}
			availableAt[e.Outcome.JobID] = e.Transition.AvailableAt
		}
	}
	p.RunnerID = uuid.NullUUID{UUID: runnerID, Valid: true}
	rows, err := s.q.FinishAttempts(ctx, s.hashJoins(ctx), dbsqlc.FinishAttemptsParams(p))
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]EndedJob, len(rows))
	changes := make([]string, 0, len(rows))
	events := map[string]int{}
	requeued := map[uuid.UUID]bool{}
	for _, row := range rows {
		out[row.ID] = EndedJob{State: record.JobState(row.State), PoolID: row.PoolID}
		changes = append(changes, row.ID.String())
		if record.JobState(row.State) == record.JobQueued {
			events["REQUEUED"]++
			requeued[row.PoolID] = true
			s.wakeWhenAvailable(row.PoolID, availableAt[row.ID])
		} else {
			events[row.State]++
		}
	}
	for typ, n := range events {
		s.countJobEvents(typ, n)
	}
	s.notifyJobChanges(changes...)
	for pool := range requeued {
		s.notifyAfterCommit(ChannelJobs, pool.String())
	}
	return out, nil
}

// CountFailures applies a runner's results to its failures in a row, in
// order: each true a host fault that counts (quarantining the runner at
// quarantineAfter), each false a reset. A change of the count is one
// notification, after the commit.
func (s *Querier) CountFailures(ctx context.Context, runnerID uuid.UUID, faults []bool, quarantineAfter int) error {
	faulted := false
	for _, fault := range faults {
		if err := mapErr(s.q.SetFailuresInARow(ctx, s.db, dbsqlc.SetFailuresInARowParams{
			ID: runnerID, HostFault: fault, LimitFailures: int32(quarantineAfter),
		})); err != nil {
			return err
		}
		faulted = faulted || fault
	}
	if faulted {
		// failuresInARow changed, and may have quarantined the runner:
		// it waits for work no longer, if it did.
		s.runnerChanged(ChannelRunnerStatus, runnerID.String())
		return s.StopWaiting(ctx, runnerID)
	}
	return nil
}

// finishParams is a batch of decided outcomes as FinishAttempts takes
// them: an array a field. Where Go has nil, the statement takes a stand-in
// that no real value can be (see FinishAttempts in queries/jobs.sql).
type finishParams dbsqlc.FinishAttemptsParams

// noNumber stands for a nil exit code or peak memory: exit codes are
// int32, and no peak is negative.
const noNumber = math.MinInt64

func (p *finishParams) add(o record.Outcome, t Transition, cancelRequested bool) {
	event := string(t.State)
	if t.State == record.JobQueued {
		event = "REQUEUED"
	}
	exit, peak := int64(noNumber), int64(noNumber)
	if o.ExitCode != nil {
		exit = int64(*o.ExitCode)
	}
	if o.PeakMemoryMiB != nil {
		peak = *o.PeakMemoryMiB
	}
	text := func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	}
	var availableAt time.Time // the zero time: none
	if t.AvailableAt != nil {
		availableAt = *t.AvailableAt
	}
	p.Ids = append(p.Ids, o.JobID)
	p.Attempts = append(p.Attempts, int32(o.Attempt))
	p.States = append(p.States, string(t.State))
	p.StateReasons = append(p.StateReasons, t.Reason)
	p.AvailableAt = append(p.AvailableAt, availableAt)
	p.CancelRequested = append(p.CancelRequested, cancelRequested)
	p.Events = append(p.Events, event)
	p.ExitCodes = append(p.ExitCodes, exit)
	p.ReturnReasons = append(p.ReturnReasons, text(o.ReturnReason))
	p.HostFaults = append(p.HostFaults, o.HostFault)
	p.Ooms = append(p.Ooms, o.OOM)
	p.PeakMemoryMib = append(p.PeakMemoryMib, peak)
	p.ImageDigests = append(p.ImageDigests, text(o.ImageDigest))
	p.RunnerVersions = append(p.RunnerVersions, text(o.RunnerVersion))
	data := ""
	if o.Data != nil {
		if b, err := json.Marshal(o.Data); err == nil {
			data = string(b)
		}
	}
	p.Data = append(p.Data, data)
}

// RecordedResult is what an accepted result recorded of its attempt, and
// its job's state now.
type RecordedResult struct {
	ExitCode     *int
	ReturnReason *string
	JobState     record.JobState
}

// Same reports whether o says what was recorded.
func (r RecordedResult) Same(o record.Outcome) bool {
	return equalPtr(r.ExitCode, o.ExitCode) && equalPtr(r.ReturnReason, o.ReturnReason)
}

func equalPtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// RecordedAttempts is, of the outcomes given, those for attempts the runner
// already ended with an accepted result, by job: a result sent again after
// it was recorded (an answer that was lost, say).
func (s *Querier) RecordedAttempts(ctx context.Context, runnerID uuid.UUID, outcomes []record.Outcome) (map[uuid.UUID]RecordedResult, error) {
	var ids []uuid.UUID
	var attempts []int32
	for _, o := range outcomes {
		if o.Attempt > 0 && o.Attempt <= math.MaxInt32 { // no other attempt was ever recorded
			ids, attempts = append(ids, o.JobID), append(attempts, int32(o.Attempt))
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.q.RecordedAttempts(ctx, s.db, dbsqlc.RecordedAttemptsParams{JobIds: ids, Attempts: attempts, RunnerID: runnerID})
	if err != nil {
		return nil, fmt.Errorf("read recorded attempts: %w", mapErr(err))
	}
	out := make(map[uuid.UUID]RecordedResult, len(rows))
	for _, r := range rows {
		rec := RecordedResult{ReturnReason: r.ReturnReason, JobState: record.JobState(r.State)}
		if r.ExitCode != nil {
			code := int(*r.ExitCode)
			rec.ExitCode = &code
		}
		out[r.JobID] = rec
	}
	return out, nil
}
