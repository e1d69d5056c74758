package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
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
	// Planned for index scans only (see ClaimJobs): planned while the table
	// looked empty, a heartbeat read the whole table.
	ids := make([]uuid.UUID, len(reports))
	for i, r := range reports {
		ids[i] = r.LeaseID
	}
	rows, err := s.q.ExtendLeases(ctx, s.indexScansOnly(ctx), dbsqlc.ExtendLeasesParams{
		LeaseSeconds: int32(leaseSeconds), RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true}, Leases: doc, Ids: ids,
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]HeldLease, len(rows))
	var started []string
	for i, r := range rows {
		out[i] = HeldLease{JobID: r.ID, Attempt: int(r.Attempt), CancelRequested: r.CancelRequested}
		if r.Started {
			started = append(started, r.ID.String())
		}
	}
	s.countJobEvents(ctx, "RUNNING", len(started))
	s.notifyJobChanges(ctx, started...)
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
	ImageDigest   *string // an empty one is none
	RunnerVersion *string // an empty one is none
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

// HeldJob is what ending an attempt reads of its job: what the fence and
// the decision rest on.
type HeldJob struct {
	ID              uuid.UUID
	State           JobState
	Attempt         int
	Undelivered     int // see Job
	MaxAttempts     int
	RunnerID        *uuid.UUID
	CancelRequested bool
}

// Tries is how many attempts reached a runner (see Job.Tries).
func (j HeldJob) Tries() int { return tries(j.Attempt, j.Undelivered) }

func heldFromRow(r dbsqlc.ReadJobsRow) HeldJob {
	return HeldJob{
		ID: r.ID, State: JobState(r.State), Attempt: int(r.Attempt), Undelivered: int(r.Undelivered),
		MaxAttempts: int(r.MaxAttempts), RunnerID: uuidPtr(r.RunnerID), CancelRequested: r.CancelRequested,
	}
}

// FinishAttempt ends one attempt: FinishAttempts of one outcome. It
// returns the job's state after it.
func (s *Store) FinishAttempt(ctx context.Context, o Outcome, quarantineAfter int, decide func(Outcome, HeldJob) Transition) (JobState, error) {
	done, err := s.FinishAttempts(ctx, o.RunnerID, []Outcome{o}, quarantineAfter, decide)
	if err != nil {
		return "", err
	}
	return done[0].State, done[0].Err
}

// finishParams is a batch of decided outcomes as FinishAttempts takes
// them: an array a field. Where Go has nil, the statement takes a stand-in
// that no real value can be (see FinishAttempts in queries/jobs.sql).
type finishParams dbsqlc.FinishAttemptsParams

// noNumber stands for a nil exit code or peak memory: exit codes are
// int32, and no peak is negative.
const noNumber = math.MinInt64

func (p *finishParams) add(o Outcome, t Transition, cancelRequested bool) {
	event := string(t.State)
	if t.State == JobQueued {
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
}

// Finished is how one outcome of a batch went: the job's state after it,
// or ErrStaleAttempt (nothing of it was recorded).
type Finished struct {
	State JobState
	Err   error
}

// FinishAttempts ends attempts of one runner's jobs in one transaction,
// fenced: an outcome counts only for the runner holding the job at exactly
// that attempt, and any other is ErrStaleAttempt and changes nothing.
// decide maps each held job to its transition. Each accepted outcome
// records its run and a job event; the runner's failures in a row follow
// the outcomes in order (quarantining it at quarantineAfter). A batch costs
// a handful of statements whatever its size, which is what lets a runner
// (or many finishing together) report cheaply.
func (s *Store) FinishAttempts(ctx context.Context, runnerID uuid.UUID, outcomes []Outcome, quarantineAfter int, decide func(Outcome, HeldJob) Transition) ([]Finished, error) {
	out := make([]Finished, len(outcomes))
	err := s.withTxRetry(ctx, func(ctx context.Context) error {
		clear(out) // a retried transaction starts over
		transitions := make([]*Transition, len(outcomes))
		after := make(map[uuid.UUID]dbsqlc.FinishAttemptsRow, len(outcomes)) // the job's state and pool
		// finish decides the outcomes at idx on the jobs as read and
		// applies the decisions, fenced. It returns those whose job was
		// held as read but changed before the update (a cancel, an expiry).
		finish := func(idx []int, read []dbsqlc.ReadJobsRow) ([]int, error) {
			held := make(map[uuid.UUID]HeldJob, len(read))
			for _, row := range read {
				held[row.ID] = heldFromRow(row)
			}
			var p finishParams
			decided := map[uuid.UUID]int{}
			for _, i := range idx {
				o := outcomes[i]
				h, ok := held[o.JobID]
				if !ok || o.RunnerID != runnerID || h.Attempt != o.Attempt || h.RunnerID == nil || *h.RunnerID != runnerID ||
					(h.State != JobLeased && h.State != JobRunning) {
					out[i].Err = ErrStaleAttempt
					continue
				}
				// The same attempt twice in a batch: the first ends it.
				delete(held, o.JobID)
				t := decide(o, h)
				transitions[i] = &t
				decided[o.JobID] = i
				p.add(o, t, h.CancelRequested)
			}
			if len(p.Ids) == 0 {
				return nil, nil
			}
			p.RunnerID = uuid.NullUUID{UUID: runnerID, Valid: true}
			updated, err := s.q.FinishAttempts(ctx, s.hashJoins(ctx), dbsqlc.FinishAttemptsParams(p))
			if err != nil {
				return nil, mapErr(err)
			}
			for _, row := range updated {
				after[row.ID] = row
				delete(decided, row.ID)
			}
			var changed []int
			for _, i := range decided {
				transitions[i] = nil
				changed = append(changed, i)
			}
			return changed, nil
		}
		all := make([]int, len(outcomes))
		ids := make([]uuid.UUID, len(outcomes))
		for i, o := range outcomes {
			all[i], ids[i] = i, o.JobID
		}
		// As for claims (see ClaimJobs): the jobs are read and ended by
		// their ids, each statement with its own planner settings.
		read, err := s.q.ReadJobs(ctx, s.indexScansOnly(ctx), ids)
		if err != nil {
			return mapErr(err)
		}
		changed, err := finish(all, read)
		if err != nil {
			return err
		}
		if len(changed) > 0 {
			// Decide those again on rows nobody can change meanwhile.
			slices.Sort(changed)
			ids = ids[:0]
			for _, i := range changed {
				ids = append(ids, outcomes[i].JobID)
			}
			if err := s.q.LockJobs(ctx, s.indexScansOnly(ctx), ids); err != nil {
				return mapErr(err)
			}
			if read, err = s.q.ReadJobs(ctx, s.indexScansOnly(ctx), ids); err != nil {
				return mapErr(err)
			}
			if again, err := finish(changed, read); err != nil {
				return err
			} else if len(again) > 0 {
				return fmt.Errorf("finish attempts: %d locked jobs not updated", len(again))
			}
		}
		// FinishAttempts wrote each accepted outcome's run and event.
		// Failures in a row follow the outcomes in order. A run of results
		// that are not counted host faults is one reset.
		pendingReset, faulted := false, false
		requeued := map[string]bool{}
		changes := make([]string, 0, len(outcomes))
		events := map[string]int{}
		for i, t := range transitions {
			if t == nil {
				continue
			}
			ended := after[outcomes[i].JobID]
			out[i].State = JobState(ended.State)
			changes = append(changes, outcomes[i].JobID.String())
			if t.State == JobQueued {
				requeued[ended.PoolID.String()] = true
				events["REQUEUED"]++
			} else {
				events[string(t.State)]++
			}
			if !t.CountsAsHostFault {
				pendingReset = true
				continue
			}
			if pendingReset {
				if err := s.setFailures(ctx, runnerID, false, quarantineAfter); err != nil {
					return err
				}
				pendingReset = false
			}
			if err := s.setFailures(ctx, runnerID, true, quarantineAfter); err != nil {
				return err
			}
			faulted = true
		}
		if pendingReset {
			if err := s.setFailures(ctx, runnerID, false, quarantineAfter); err != nil {
				return err
			}
		}
		if faulted {
			// failuresInARow changed, and may have quarantined the runner:
			// one notification for the batch, after the commit.
			s.runnerChanged(ctx, ChannelRunnerStatus, runnerID.String())
		}
		for typ, n := range events {
			s.countJobEvents(ctx, typ, n)
		}
		s.notifyJobChanges(ctx, changes...)
		for pool := range requeued {
			s.notifyAfterCommit(ctx, ChannelJobs, pool)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReturnUndelivered gives back leases (as ClaimJobs returned them) granted
// to a request that ended before the answer reached the runner: each job is QUEUED again at once
// (CANCELLED if a cancel came meanwhile), its run ends "not delivered",
// and the attempt is not counted as a try. Only the runner's own leases
// at exactly the attempt, still LEASED, are returned; it reports how many
// were. The runner's failures in a row are left alone: it ran nothing.
func (s *Store) ReturnUndelivered(ctx context.Context, runnerID uuid.UUID, leased []Job) (int, error) {
	if len(leased) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(leased))
	attempts := make([]int32, len(leased))
	for i, j := range leased {
		ids[i], attempts[i] = j.ID, int32(j.Attempt)
	}
	var n int
	err := s.WithTx(ctx, func(ctx context.Context) error {
		back, err := s.q.ReturnUndelivered(ctx, s.conn(ctx), dbsqlc.ReturnUndeliveredParams{
			Ids: ids, Attempts: attempts, RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true}})
		if err != nil {
			return mapErr(err)
		}
		n = len(back)
		changes := make([]string, len(back))
		pools := map[uuid.UUID]bool{}
		for i, b := range back {
			changes[i] = b.ID.String()
			if JobState(b.State) == JobQueued {
				pools[b.PoolID] = true
				s.countJobEvents(ctx, "REQUEUED", 1)
			} else {
				s.countJobEvents(ctx, string(JobCancelled), 1)
			}
		}
		s.notifyJobChanges(ctx, changes...)
		for p := range pools {
			s.notifyAfterCommit(ctx, ChannelJobs, p.String())
		}
		return nil
	})
	return n, err
}

func (s *Store) setFailures(ctx context.Context, runnerID uuid.UUID, hostFault bool, quarantineAfter int) error {
	return mapErr(s.q.SetFailuresInARow(ctx, s.conn(ctx), dbsqlc.SetFailuresInARowParams{
		ID: runnerID, HostFault: hostFault, LimitFailures: int32(quarantineAfter),
	}))
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
		s.notifyJobChanges(ctx, jobID.String())
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
// from after the chunk (afterAttempt, afterSeq) ((0, -1) is the start), at
// most max chunks.
func (s *Store) JobLogs(ctx context.Context, jobID uuid.UUID, afterAttempt, afterSeq, max int) ([]LogChunk, error) {
	rows, err := s.q.JobLogs(ctx, s.conn(ctx), dbsqlc.JobLogsParams{JobID: jobID, AfterAttempt: int32(afterAttempt), AfterSeq: int32(afterSeq), MaxRows: int32(max)})
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

// JobOutput is the end of a job's output, in order, and the size of all
// of it.
type JobOutput struct {
	Chunks []LogChunk
	Bytes  int64
}

// JobLogsForJobs returns the end of each job's output: the chunks that hold
// its last tailBytes (whole chunks, so up to one chunk more).
func (s *Store) JobLogsForJobs(ctx context.Context, ids []uuid.UUID, tailBytes int64) (map[uuid.UUID]JobOutput, error) {
	rows, err := s.q.JobLogsForJobs(ctx, s.conn(ctx), dbsqlc.JobLogsForJobsParams{JobIds: ids, TailBytes: tailBytes})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]JobOutput, len(ids))
	for _, id := range ids {
		out[id] = JobOutput{Chunks: []LogChunk{}}
	}
	for _, r := range rows {
		o := out[r.JobID]
		o.Chunks, o.Bytes = append(o.Chunks, LogChunk{Attempt: int(r.Attempt), Seq: int(r.Seq), Data: r.Data}), r.Total
		out[r.JobID] = o
	}
	return out, nil
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
