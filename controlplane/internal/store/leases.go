package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

// ErrStaleAttempt: the report names an attempt the runner no longer holds
// (a newer attempt began, or the lease ended). Nothing was changed.
var ErrStaleAttempt = errors.New("stale attempt")

// ErrInteractive: output sent for an interactive job (stdio TTY or PIPE),
// whose bytes are never stored. Nothing was changed.
var ErrInteractive = errors.New("the job is interactive: its output is not stored")

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
func (s *Querier) ExtendLeases(ctx context.Context, runnerID uuid.UUID, leaseSeconds int, reports []LeaseReport) ([]HeldLease, error) {
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
	s.countJobEvents("RUNNING", len(started))
	s.notifyJobChanges(started...)
	return out, nil
}

// ReturnUndelivered gives back leases (as ClaimJobs returned them) that
// never reached the runner, why says how it is known (the request ended
// before its answer; no heartbeat named the lease): each job is QUEUED again at once
// (CANCELLED if a cancel came meanwhile), its run ends "not delivered",
// and the attempt is not counted as a try. Only the runner's own leases
// at exactly the attempt, still LEASED, are returned; it reports how many
// were. The runner's failures in a row are left alone: it ran nothing.
func (s *Querier) ReturnUndelivered(ctx context.Context, runnerID uuid.UUID, leased []record.Job, why string) (int, error) {
	if len(leased) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(leased))
	attempts := make([]int32, len(leased))
	for i, j := range leased {
		ids[i], attempts[i] = j.ID, int32(j.Attempt)
	}
	var n int
	err := s.atomically(ctx, func(tx *Tx) error {
		back, err := tx.q.ReturnUndelivered(ctx, tx.db, dbsqlc.ReturnUndeliveredParams{
			Ids: ids, Attempts: attempts, RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true}, Detail: "lease not delivered: " + why})
		if err != nil {
			return mapErr(err)
		}
		n = len(back)
		changes := make([]string, len(back))
		pools := map[uuid.UUID]bool{}
		for i, b := range back {
			changes[i] = b.ID.String()
			if record.JobState(b.State) == record.JobQueued {
				pools[b.PoolID] = true
				tx.countJobEvents("REQUEUED", 1)
			} else {
				tx.countJobEvents(string(record.JobCancelled), 1)
			}
		}
		tx.notifyJobChanges(changes...)
		for p := range pools {
			tx.notifyAfterCommit(ChannelJobs, p.String())
		}
		return nil
	})
	return n, err
}

// HoldsAttempt is nil when the runner holds the job at this attempt (the
// job has not ended: an ended job is held by no runner), ErrStaleAttempt
// when it does not. Session streams are fenced so.
func (s *Querier) HoldsAttempt(ctx context.Context, jobID uuid.UUID, attempt int, runnerID uuid.UUID) error {
	if attempt < 1 || attempt > math.MaxInt32 {
		return ErrStaleAttempt
	}
	held, err := s.q.HeldAttempt(ctx, s.db, dbsqlc.HeldAttemptParams{ID: jobID, Attempt: int32(attempt), RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true}})
	if err != nil {
		return mapErr(err)
	}
	if !held.Held {
		return ErrStaleAttempt
	}
	return nil
}

// AppendLog stores one chunk of an attempt's output, fenced like results.
// A chunk stored before (same sequence number) is not stored again.
func (s *Querier) AppendLog(ctx context.Context, jobID uuid.UUID, attempt int, runnerID uuid.UUID, seq int, data []byte) error {
	if attempt < 1 || attempt > math.MaxInt32 || seq < 0 || seq > math.MaxInt32 {
		return ErrStaleAttempt // no attempt is numbered so, nor held
	}
	return s.atomically(ctx, func(tx *Tx) error {
		held, err := tx.q.HeldAttempt(ctx, tx.db, dbsqlc.HeldAttemptParams{
			ID: jobID, Attempt: int32(attempt), RunnerID: uuid.NullUUID{UUID: runnerID, Valid: true},
		})
		if err != nil {
			return mapErr(err)
		}
		if !held.Held {
			return ErrStaleAttempt
		}
		if held.Interactive {
			return ErrInteractive
		}
		if _, err := tx.q.InsertLogChunk(ctx, tx.db, dbsqlc.InsertLogChunkParams{JobID: jobID, Attempt: int32(attempt), Seq: int32(seq), Data: data}); err != nil {
			return mapErr(err)
		}
		tx.notifyJobChanges(jobID.String())
		return nil
	})
}

// JobLogs returns a job's output in order (by attempt, then sequence),
// from after the chunk (afterAttempt, afterSeq) ((0, -1) is the start), at
// most max chunks.
func (s *Querier) JobLogs(ctx context.Context, jobID uuid.UUID, afterAttempt, afterSeq, max int) ([]record.LogChunk, error) {
	rows, err := s.q.JobLogs(ctx, s.db, dbsqlc.JobLogsParams{JobID: jobID, AfterAttempt: int32(afterAttempt), AfterSeq: int32(afterSeq), MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.LogChunk, len(rows))
	for i, r := range rows {
		out[i] = record.LogChunk{Attempt: int(r.Attempt), Seq: int(r.Seq), Data: r.Data}
	}
	return out, nil
}

// JobEvents lists a job's events in order, those after afterID (0: all).
func (s *Querier) JobEvents(ctx context.Context, jobID uuid.UUID, afterID int64) ([]record.JobEvent, error) {
	rows, err := s.q.JobEvents(ctx, s.db, dbsqlc.JobEventsParams{JobID: jobID, AfterID: afterID})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.JobEvent, len(rows))
	for i, r := range rows {
		out[i] = jobEventFromRow(r)
	}
	return out, nil
}

func jobEventFromRow(r dbsqlc.JobEvent) record.JobEvent {
	return record.JobEvent{ID: r.ID, At: r.At, Type: r.Type, Attempt: int(r.Attempt), RunnerID: uuidPtr(r.RunnerID), Detail: r.Detail}
}

func jobRunFromRow(r dbsqlc.JobRun) record.JobRun {
	run := record.JobRun{JobID: r.JobID, Attempt: int(r.Attempt), RunnerID: r.RunnerID, RunnerName: r.RunnerName, LeasedAt: r.LeasedAt,
		FinishedAt: r.FinishedAt, ExitCode: intPtr(r.ExitCode), ReturnReason: r.ReturnReason, HostFault: r.HostFault, OOM: r.Oom,
		PeakMemoryMiB: r.PeakMemoryMib, ImageDigest: r.ImageDigest, RunnerVersion: r.RunnerVersion}
	if len(r.Data) > 0 {
		var d record.RunData
		if json.Unmarshal(r.Data, &d) == nil {
			run.Data = &d
		}
	}
	return run
}

// The ...ForJobs functions read several jobs' events, runs and logs in one
// statement each, for job lists. The caller has read the jobs through its
// scope; every id asked for gets an entry, empty when it has nothing.

// JobEventsForJobs returns each job's events, oldest first.
func (s *Querier) JobEventsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobEvent, error) {
	rows, err := s.q.JobEventsForJobs(ctx, s.db, ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobEvent) (uuid.UUID, record.JobEvent) { return r.JobID, jobEventFromRow(r) })
}

// JobRunsForJobs returns each job's runs by attempt.
func (s *Querier) JobRunsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobRun, error) {
	rows, err := s.q.JobRunsForJobs(ctx, s.db, ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobRun) (uuid.UUID, record.JobRun) { return r.JobID, jobRunFromRow(r) })
}

// JobLogsForJobs returns the end of each job's output: the chunks that hold
// its last tailBytes (whole chunks, so up to one chunk more).
func (s *Querier) JobLogsForJobs(ctx context.Context, ids []uuid.UUID, tailBytes int64) (map[uuid.UUID]record.JobOutput, error) {
	rows, err := s.q.JobLogsForJobs(ctx, s.db, dbsqlc.JobLogsForJobsParams{JobIds: ids, TailBytes: tailBytes})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.JobOutput, len(ids))
	for _, id := range ids {
		out[id] = record.JobOutput{Chunks: []record.LogChunk{}}
	}
	for _, r := range rows {
		o := out[r.JobID]
		o.Chunks, o.Bytes = append(o.Chunks, record.LogChunk{Attempt: int(r.Attempt), Seq: int(r.Seq), Data: r.Data}), r.Total
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

// JobOptionsOf reads a job's options alone.
func (s *Querier) JobOptionsOf(ctx context.Context, id uuid.UUID) (record.JobOptions, error) {
	raw, err := s.q.JobOptionsOf(ctx, s.db, id)
	if err != nil {
		return record.JobOptions{}, mapErr(err)
	}
	var o record.JobOptions
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &o); err != nil {
			return record.JobOptions{}, fmt.Errorf("job %s's options: %w", id, err)
		}
	}
	return o, nil
}

// OpenJobSession records a session as it opens.
func (s *Querier) OpenJobSession(ctx context.Context, js record.JobSession) error {
	return mapErr(s.q.InsertJobSession(ctx, s.db, dbsqlc.InsertJobSessionParams{
		ID: js.ID, JobID: js.JobID, Attempt: int32(js.Attempt), AdminID: nullUUID(js.AdminID), AdminName: js.AdminName,
		Kind: js.Kind, Command: js.Command,
	}))
}

// EndJobSession records a session's end: its bytes each way and how it
// ended. A session already ended is left as it is.
func (s *Querier) EndJobSession(ctx context.Context, id uuid.UUID, bytesIn, bytesOut int64, endCode string) error {
	return mapErr(s.q.EndJobSession(ctx, s.db, dbsqlc.EndJobSessionParams{ID: id, BytesIn: bytesIn, BytesOut: bytesOut, EndCode: &endCode}))
}

// JobSessionsForJobs returns each job's sessions, in the order they opened.
func (s *Querier) JobSessionsForJobs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]record.JobSession, error) {
	rows, err := s.q.JobSessionsForJobs(ctx, s.db, ids)
	return byJob(ids, rows, err, func(r dbsqlc.JobSession) (uuid.UUID, record.JobSession) {
		js := record.JobSession{ID: r.ID, JobID: r.JobID, Attempt: int(r.Attempt), AdminName: r.AdminName, Kind: r.Kind,
			Command: r.Command, StartedAt: r.StartedAt, EndedAt: r.EndedAt, BytesIn: r.BytesIn, BytesOut: r.BytesOut}
		if r.AdminID.Valid {
			id := r.AdminID.UUID
			js.AdminID = &id
		}
		if r.EndCode != nil {
			js.EndCode = *r.EndCode
		}
		return r.JobID, js
	})
}
