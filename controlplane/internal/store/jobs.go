package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

func jobFromRow(r dbsqlc.Job) record.Job {
	env := map[string]string{}
	_ = json.Unmarshal(r.Env, &env)
	var options record.JobOptions // NULL (nearly every job): none
	if len(r.Options) > 0 {
		options = jobOptions(r.Options)
	}
	return record.Job{
		Options: options,
		ID:      r.ID, PoolID: r.PoolID, SubmittedFor: uuidPtr(r.OrganisationID), SubmittedBy: uuidPtr(r.SubmittedBy), Image: r.Image, Command: r.Command, Env: env,
		Claim:    record.Claim{Cores: r.Cores, MemoryMiB: r.MemoryMib, GPUs: int(r.Gpus), WallClockSeconds: int(r.WallClockSeconds)},
		Priority: int(r.Priority), MaxAttempts: int(r.MaxAttempts), IdempotencyKey: r.IdempotencyKey, Kind: r.Kind,
		State: record.JobState(r.State), StateReason: r.StateReason, Attempt: int(r.Attempt), Undelivered: int(r.Undelivered),
		RunnerID: uuidPtr(r.RunnerID), LeaseExpiresAt: r.LeaseExpiresAt, AvailableAt: r.AvailableAt, CancelRequested: r.CancelRequested,
		SubmittedAt: r.SubmittedAt, FinishedAt: r.FinishedAt,
	}
}

// jobOptions reads a job's options document. (Apart from jobFromRow, so
// that only a job that has options has them decoded on the heap.)
func jobOptions(doc []byte) (o record.JobOptions) {
	_ = json.Unmarshal(doc, &o)
	return o
}

// NewJob is what SubmitJob needs.
type NewJob struct {
	PoolID         uuid.UUID
	SubmittedBy    *uuid.UUID
	Image          string
	Command        []string
	Env            map[string]string
	Claim          record.Claim
	Options        record.JobOptions
	Priority       int
	MaxAttempts    int
	IdempotencyKey *string
	Kind           string
}

// SubmitJob queues a job in a pool inside scope. A job submitted before
// with the same idempotency key in the same pool is returned instead, and
// created is false.
func (s *Querier) SubmitJob(ctx context.Context, scope record.Scope, n NewJob) (job record.Job, created bool, err error) {
	jobs, made, err := s.SubmitJobs(ctx, scope, []NewJob{n})
	if err != nil {
		return record.Job{}, false, err
	}
	return jobs[0], made[0], nil
}

// MaxBatch bounds one batch submission.
const MaxBatch = 1000

// SubmitJobs queues jobs of one pool in one statement and one transaction,
// all or none, and returns them in the order given. A job whose idempotency
// key the pool has seen (before, or earlier in the batch) is the job that
// key made, and its created is false.
func (s *Querier) SubmitJobs(ctx context.Context, scope record.Scope, ns []NewJob) (jobs []record.Job, created []bool, err error) {
	if len(ns) == 0 || len(ns) > MaxBatch {
		return nil, nil, fmt.Errorf("%w: 1 to %d jobs a batch", record.ErrInvalid, MaxBatch)
	}
	poolID := ns[0].PoolID
	p, err := insertParams(ns)
	if err != nil {
		return nil, nil, err
	}
	jobs, created = make([]record.Job, len(ns)), make([]bool, len(ns))
	err = s.atomically(ctx, func(tx *Tx) error {
		pool, err := tx.UsablePool(ctx, scope, poolID)
		if err != nil {
			return err
		}
		// An organisation's job in a platform pool carries the organisation.
		if org, ok := scope.Organisation(); ok && pool.OrganisationID == nil {
			p.OrganisationID = uuid.NullUUID{UUID: org, Valid: true}
		}
		inserted, err := tx.q.InsertJobs(ctx, tx.db, p)
		if err != nil {
			return mapErr(err)
		}
		byID := make(map[uuid.UUID]dbsqlc.InsertJobsRow, len(inserted))
		for _, r := range inserted {
			byID[r.ID] = r
		}
		for i, id := range p.Ids {
			if r, ok := byID[id]; ok {
				jobs[i], created[i] = newJob(ns[i], r, p.OrganisationID), true
				continue
			}
			// Not inserted: its key was used before.
			existing, err := tx.q.JobByIdempotencyKey(ctx, tx.db, dbsqlc.JobByIdempotencyKeyParams{
				PoolID: poolID, IdempotencyKey: ns[i].IdempotencyKey, OrganisationID: p.OrganisationID})
			if err != nil {
				return mapErr(err)
			}
			jobs[i] = jobFromRow(existing)
		}
		if len(inserted) == 0 {
			return nil
		}
		tx.countJobEvents("SUBMITTED", len(inserted))
		tx.notifyAfterCommit(ChannelJobs, poolID.String())
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return jobs, created, nil
}

// newJob is the job n became: what the database decided of it (r), and
// the rest as given, stored as jobFromRow reads it back.
// insertParams checks a batch (one pool, values that travel as int32) and
// lays it out as InsertJobs takes it: an array a field.
func insertParams(ns []NewJob) (dbsqlc.InsertJobsParams, error) {
	poolID := ns[0].PoolID
	p := dbsqlc.InsertJobsParams{PoolID: poolID}
	for _, n := range ns {
		if n.PoolID != poolID {
			return p, fmt.Errorf("%w: every job of a batch goes to the same pool", record.ErrInvalid)
		}
		if n.IdempotencyKey != nil && *n.IdempotencyKey == "" {
			return p, fmt.Errorf("%w: an idempotency key is not empty", record.ErrInvalid)
		}
		// Checked here, not by the table: they travel as int32, and the
		// nil UUID stands for no submitter.
		for _, v := range []int{n.Claim.GPUs, n.Claim.WallClockSeconds, n.Priority, n.MaxAttempts} {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return p, fmt.Errorf("%w: %d is out of range", record.ErrInvalid, v)
			}
		}
		if n.SubmittedBy != nil && *n.SubmittedBy == uuid.Nil {
			return p, fmt.Errorf("%w: no submitter has the nil UUID", record.ErrInvalid)
		}
		// Jobs of one batch share submitted_at; time-ordered ids keep the
		// lease order the order given.
		id, err := uuid.NewV7()
		if err != nil {
			return p, err
		}
		env := []byte("{}")
		if n.Env != nil {
			if env, err = json.Marshal(n.Env); err != nil {
				return p, err
			}
		}
		var submittedBy uuid.UUID // the nil UUID: none
		if n.SubmittedBy != nil {
			submittedBy = *n.SubmittedBy
		}
		key := "" // none
		if n.IdempotencyKey != nil {
			key = *n.IdempotencyKey
		}
		p.Ids = append(p.Ids, id)
		p.SubmittedBy = append(p.SubmittedBy, submittedBy)
		p.Images = append(p.Images, n.Image)
		p.Commands = append(p.Commands, textArray(n.Command))
		p.Envs = append(p.Envs, string(env))
		p.Cores = append(p.Cores, n.Claim.Cores)
		p.MemoryMib = append(p.MemoryMib, n.Claim.MemoryMiB)
		p.Gpus = append(p.Gpus, int32(n.Claim.GPUs))
		p.WallClockSeconds = append(p.WallClockSeconds, int32(n.Claim.WallClockSeconds))
		p.Priorities = append(p.Priorities, int32(n.Priority))
		p.MaxAttempts = append(p.MaxAttempts, int32(n.MaxAttempts))
		p.IdempotencyKeys = append(p.IdempotencyKeys, key)
		p.Kinds = append(p.Kinds, n.Kind)
		options := "" // none
		if !n.Options.IsZero() {
			b, err := json.Marshal(n.Options)
			if err != nil {
				return p, err
			}
			options = string(b)
		}
		p.Options = append(p.Options, options)
	}
	return p, nil
}

func newJob(n NewJob, r dbsqlc.InsertJobsRow, org uuid.NullUUID) record.Job {
	// Copies: the job is not to share the caller's slice and map.
	command, env := slices.Clone(n.Command), maps.Clone(n.Env)
	if command == nil {
		command = []string{}
	}
	if env == nil {
		env = map[string]string{}
	}
	return record.Job{
		ID: r.ID, PoolID: n.PoolID, SubmittedFor: uuidPtr(org), SubmittedBy: n.SubmittedBy, Image: n.Image, Command: command, Env: env, Claim: n.Claim,
		Options:  n.Options,
		Priority: n.Priority, MaxAttempts: n.MaxAttempts, IdempotencyKey: n.IdempotencyKey, Kind: n.Kind,
		State: record.JobState(r.State), StateReason: r.StateReason, Attempt: int(r.Attempt), Undelivered: int(r.Undelivered),
		AvailableAt: r.AvailableAt, CancelRequested: r.CancelRequested, SubmittedAt: r.SubmittedAt,
	}
}

// textArray writes a PostgreSQL array literal of texts: each element
// quoted, its quotes and backslashes escaped, so that none reads as NULL,
// a delimiter or a nested array.
func textArray(elems []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(e); j++ {
			if e[j] == '"' || e[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(e[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// jobEvent records a change of a job and wakes its subscribers.
func (s *Querier) jobEvent(ctx context.Context, job uuid.UUID, typ string, attempt int, runner *uuid.UUID, detail string) error {
	if err := s.q.InsertJobEvent(ctx, s.db, dbsqlc.InsertJobEventParams{
		JobID: job, Type: typ, Attempt: int32(attempt), RunnerID: nullUUID(runner), Detail: detail,
	}); err != nil {
		return mapErr(err)
	}
	s.countJobEvents(typ, 1)
	s.notifyJobChanges(job.String())
	return nil
}

// Job is one job inside scope, or ErrNotFound.
func (s *Querier) Job(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Job, error) {
	row, err := s.q.GetJob(ctx, s.db, dbsqlc.GetJobParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Job{}, mapErr(err)
	}
	return jobFromRow(row), nil
}

// Jobs lists a page of the jobs inside scope that match f, newest first.
func (s *Querier) Jobs(ctx context.Context, scope record.Scope, f record.JobFilter, p record.Page) ([]record.Job, error) {
	var state *string
	if f.State != nil {
		v := string(*f.State)
		state = &v
	}
	var before uuid.NullUUID
	if p.After != nil {
		before = uuid.NullUUID{UUID: p.After.ID, Valid: true}
	}
	// A job's id holds its submission time to the millisecond, and the
	// store makes it in the same statement that stamps submitted_at: a
	// window of ids a second wider than the times asked for holds every
	// job submitted in it, and the times keep the answer exact.
	minID, maxID := idBound(f.SubmittedAfter, -time.Second), idBound(f.SubmittedBefore, time.Second)
	var rows []dbsqlc.Job
	var err error
	if scope.All() && f.PoolID == nil {
		rows, err = s.q.ListJobs(ctx, s.db, dbsqlc.ListJobsParams{State: state, BeforeID: before, MinID: minID, MaxID: maxID,
			Kind: f.Kind, SubmittedAfter: f.SubmittedAfter, SubmittedBefore: f.SubmittedBefore, MaxRows: int32(p.Limit)})
	} else {
		// Some pools only: through each one's own index.
		rows, err = s.q.ListJobsInPools(ctx, s.db, dbsqlc.ListJobsInPoolsParams{
			AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope), PoolID: nullUUID(f.PoolID), State: state,
			BeforeID: before, MinID: minID, MaxID: maxID, Kind: f.Kind,
			SubmittedAfter: f.SubmittedAfter, SubmittedBefore: f.SubmittedBefore, MaxRows: int32(p.Limit)})
	}
	if org, ok := scope.Organisation(); ok && err == nil {
		// And what the organisation submitted to the platform's pools.
		var theirs []dbsqlc.Job
		theirs, err = s.q.ListJobsSubmittedBy(ctx, s.db, dbsqlc.ListJobsSubmittedByParams{
			OrganisationID: uuid.NullUUID{UUID: org, Valid: true}, PoolID: nullUUID(f.PoolID), State: state,
			BeforeID: before, MinID: minID, MaxID: maxID, Kind: f.Kind,
			SubmittedAfter: f.SubmittedAfter, SubmittedBefore: f.SubmittedBefore, MaxRows: int32(p.Limit)})
		rows = newestFirst(rows, theirs, p.Limit)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.Job, len(rows))
	for i, r := range rows {
		out[i] = jobFromRow(r)
	}
	return out, nil
}

// newestFirst merges two job lists ordered newest first (by id) into one,
// at most limit long.
func newestFirst(a, b []dbsqlc.Job, limit int) []dbsqlc.Job {
	if len(b) == 0 {
		return a
	}
	out := make([]dbsqlc.Job, 0, min(len(a)+len(b), limit))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && bytes.Compare(a[0].ID[:], b[0].ID[:]) > 0) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// idBound is the smallest UUIDv7 of the millisecond at t+slack (no bound
// for nil t).
func idBound(t *time.Time, slack time.Duration) uuid.NullUUID {
	if t == nil {
		return uuid.NullUUID{}
	}
	ms := max(t.Add(slack).UnixMilli(), 0)
	var id uuid.UUID
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 // version 7, the rest zero: the smallest of that millisecond
	return uuid.NullUUID{UUID: id, Valid: true}
}

// ErrJobFinished: the job is in a final state.
// It is a conflict (record.ErrConflict): the request was fine, the job's
// state is not what it needs.
var ErrJobFinished = fmt.Errorf("%w: the job has finished", record.ErrConflict)

// CancelJob cancels a queued job at once; a leased or running one is asked
// to stop (its runner hears CANCEL at its next heartbeat) and is CANCELLED
// when the runner reports back.
func (s *Querier) CancelJob(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Job, error) {
	var out record.Job
	err := s.atomically(ctx, func(tx *Tx) error {
		row, err := tx.q.GetJobForUpdate(ctx, tx.db, dbsqlc.GetJobForUpdateParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
		if err != nil {
			return mapErr(err)
		}
		j := jobFromRow(row)
		switch {
		case j.State.Finished():
			return ErrJobFinished
		case j.State == record.JobQueued || j.State == record.JobBlocked:
			if err := tx.q.SetJobState(ctx, tx.db, dbsqlc.SetJobStateParams{ID: id, State: string(record.JobCancelled), StateReason: "cancelled before it ran"}); err != nil {
				return mapErr(err)
			}
			if err := tx.jobEvent(ctx, id, "CANCELLED", j.Attempt, nil, ""); err != nil {
				return err
			}
		case !j.CancelRequested:
			if err := tx.q.RequestCancel(ctx, tx.db, id); err != nil {
				return mapErr(err)
			}
			if err := tx.jobEvent(ctx, id, "CANCEL_REQUESTED", j.Attempt, j.RunnerID, ""); err != nil {
				return err
			}
		}
		out, err = tx.Job(ctx, scope, id)
		return err
	})
	return out, err
}

// ClaimJobs leases, in one transaction, the best jobs that fit the runner
// together, at most max of them (none when nothing fits).
func (s *Querier) ClaimJobs(ctx context.Context, c record.ClaimRequest, max int) ([]record.Job, error) {
	// One statement, planned for index scans only (indexScansOnly, one
	// round trip still); the notification goes once it has committed.
	//
	// A claim's plan must not rest on the statistics, nor on the table's
	// size when a connection planned it (a prepared statement keeps that
	// plan). An index scan walks the queue in order, stops at the limit,
	// and marks the dead entries it passes (jobs leased, held and ended
	// since the last vacuum) so that the next claim skips them. On a table
	// never analyzed, or analyzed while empty, the planner chose bitmap
	// scans, which mark nothing, so every claim read every entry no vacuum
	// had removed yet, the queue's and its runner's, so that a claim's work
	// grew with every job leased since; or it chose sequential scans of a
	// table it took for empty.
	specBytes := c.SpecBytes
	if specBytes == 0 {
		specBytes = math.MaxInt64
	}
	maxHeld := int32(c.MaxHeld)
	if c.MaxHeld <= 0 || c.MaxHeld > math.MaxInt32 {
		maxHeld = math.MaxInt32
	}
	rows, err := s.q.ClaimJobs(ctx, s.indexScansOnly(ctx), dbsqlc.ClaimJobsParams{
		Now: c.Now, DefaultLeaseSeconds: int32(c.DefaultLeaseSeconds), RunnerID: c.RunnerID, Kinds: c.Kinds,
		FreeCores: c.Free.Cores, FreeMemoryMib: c.Free.MemoryMiB, FreeGpus: int32(c.Free.GPUs),
		MaxCores: c.Largest.Cores, MaxMemoryMib: c.Largest.MemoryMiB, MaxGpus: int32(c.Largest.GPUs), MaxJobs: int32(max),
		MaxSpecBytes: specBytes, MaxHeld: maxHeld, UnavailableImages: nonNil(c.UnavailableImages), Stdio: stdioModes(c.Stdio),
		WaitSeconds: int32(min(c.WaitSeconds, math.MaxInt32)),
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.Job, len(rows))
	payloads := make([]string, len(rows))
	stoppedAsking := false
	for i, row := range rows {
		out[i], payloads[i] = jobFromRow(claimedJob(row)), row.ID.String()
		stoppedAsking = stoppedAsking || row.StoppedAsking
	}
	s.countJobEvents("LEASED", len(rows))
	notes := map[string][]string{ChannelJobChanges: payloads}
	if stoppedAsking {
		// The runner no longer waits: jobs that others left to it and it
		// did not take are theirs again. (One statement with the changes.)
		notes[ChannelJobs] = []string{out[0].PoolID.String()}
	}
	s.notifyAllAfterCommit(notes)
	return out, nil
}

// stdioModes are a claim's interactive modes as the query reads them.
func stdioModes(modes []runnerapi.Stdio) []string {
	out := make([]string, len(modes))
	for i, m := range modes {
		out[i] = string(m)
	}
	return out
}

// claimedJob is the job row of a claim's answer (the row less the claim's
// own column; TestClaimedJobHasEveryColumn keeps the two alike).
func claimedJob(r dbsqlc.ClaimJobsRow) dbsqlc.Job {
	return dbsqlc.Job{
		ID: r.ID, PoolID: r.PoolID, SubmittedBy: r.SubmittedBy, Image: r.Image, Command: r.Command, Env: r.Env,
		Cores: r.Cores, MemoryMib: r.MemoryMib, Gpus: r.Gpus, WallClockSeconds: r.WallClockSeconds, Priority: r.Priority,
		MaxAttempts: r.MaxAttempts, IdempotencyKey: r.IdempotencyKey, Kind: r.Kind, State: r.State, StateReason: r.StateReason,
		Attempt: r.Attempt, RunnerID: r.RunnerID, LeaseExpiresAt: r.LeaseExpiresAt, AvailableAt: r.AvailableAt,
		CancelRequested: r.CancelRequested, SubmittedAt: r.SubmittedAt, FinishedAt: r.FinishedAt, Undelivered: r.Undelivered,
		LeasedAt: r.LeasedAt, LeaseHeardAt: r.LeaseHeardAt, OrganisationID: r.OrganisationID, Options: r.Options,
	}
}

// ClaimJob leases the best job that fits, if any (false when none does).
func (s *Querier) ClaimJob(ctx context.Context, c record.ClaimRequest) (record.Job, bool, error) {
	jobs, err := s.ClaimJobs(ctx, c, 1)
	if err != nil || len(jobs) == 0 {
		return record.Job{}, false, err
	}
	return jobs[0], true, nil
}

// TouchWorkRequest records that the runner asked for work of these kinds
// and returns its latest recovery proof (nil before its agent sent one).
// One statement, which writes at most every 30 seconds a runner, or when
// its kinds change (see the query).
func (s *Querier) TouchWorkRequest(ctx context.Context, runnerID uuid.UUID, kinds []string) (*runnerapi.RecoveryProof, error) {
	doc, err := s.q.TouchWorkRequest(ctx, s.db, dbsqlc.TouchWorkRequestParams{ID: runnerID, Kinds: nonNil(kinds)})
	if err != nil {
		return nil, mapErr(err)
	}
	proof, err := decodeOptional[runnerapi.RecoveryProof](doc)
	if err != nil {
		return nil, fmt.Errorf("read runner %s: stored recovery proof: %w", runnerID, err)
	}
	return proof, nil
}

// RecordRecovery stores the recovery proof (JSON) a runner's agent sent
// after its survivor check, replacing the one before.
func (s *Querier) RecordRecovery(ctx context.Context, runnerID uuid.UUID, proof []byte) error {
	n, err := s.q.RecordRecovery(ctx, s.db, dbsqlc.RecordRecoveryParams{ID: runnerID, Recovery: proof})
	if err != nil {
		return mapErr(err)
	}
	if n == 0 {
		return record.ErrNotFound
	}
	return nil
}

// JobEventTypes are the types of the events the store writes for jobs.
var JobEventTypes = []string{"SUBMITTED", "LEASED", "RUNNING", "REQUEUED", "SUCCEEDED", "FAILED", "CANCEL_REQUESTED",
	"CANCELLED", "EXPIRED", "BLOCKED", "UNBLOCKED", "LEASE_EXPIRED"}
