package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/internal/testutil"
)

type jobsBundle struct {
	db    *pgxpool.Pool
	store *store.Store
	org   record.Organisation
	pool  record.Pool
}

func jobsSetup(t *testing.T) jobsBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.NewPool(t)
	s := store.New(db)
	org, err := s.CreateOrganisation(ctx, "org")
	require.NoError(t, err)
	p, err := s.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu"})
	require.NoError(t, err)
	return jobsBundle{db: db, store: s, org: org, pool: p}
}

// runner adds an approved runner with cores, memory and GPUs.
func (b jobsBundle) runner(t *testing.T, cores float64, memMiB int64, gpus int) uuid.UUID {
	t.Helper()
	return storetest.ApprovedRunner(t, b.store, b.pool.ID, cores, memMiB, gpus)
}

func (b jobsBundle) submit(t *testing.T, c record.Claim, mods ...func(*store.NewJob)) record.Job {
	t.Helper()
	n := b.newJob(c)
	for _, m := range mods {
		m(&n)
	}
	j, _, err := b.store.SubmitJob(context.Background(), record.AllOrganisations(), n)
	require.NoError(t, err)
	return j
}

// newJob is a job of the bundle's pool that claims c.
func (b jobsBundle) newJob(c record.Claim) store.NewJob {
	return store.NewJob{PoolID: b.pool.ID, Image: "busybox", Command: []string{"true"}, Claim: c, MaxAttempts: 3, Kind: "default"}
}

// leased submits n one-core jobs in one batch and leases them all to r,
// best first.
func (b jobsBundle) leased(t *testing.T, r uuid.UUID, n int) []record.Job {
	t.Helper()
	ctx := context.Background()
	batch := make([]store.NewJob, n)
	for i := range batch {
		batch[i] = b.newJob(record.Claim{Cores: 1, WallClockSeconds: 60})
	}
	_, _, err := b.store.SubmitJobs(ctx, record.AllOrganisations(), batch)
	require.NoError(t, err)
	leased, err := b.store.ClaimJobs(ctx, anything(r), n)
	require.NoError(t, err)
	require.Len(t, leased, n)
	return leased
}

// leaseAndLetExpire leases the runner's next job at *at, as the attempt
// given, and lets the lease run out: *at moves an hour on, and the sweeper
// runs then.
func (b jobsBundle) leaseAndLetExpire(t *testing.T, r uuid.UUID, at *time.Time, attempt int) {
	t.Helper()
	ctx := context.Background()
	req := anything(r)
	req.Now = at
	got, ok, err := b.store.ClaimJob(ctx, req)
	require.NoError(t, err)
	require.True(t, ok, "attempt %d", attempt)
	require.Equal(t, attempt, got.Attempt)
	*at = at.Add(time.Hour)
	_, err = b.sweep(ctx, sweepOptions{Now: at, DefaultQueueTimeoutHours: 1000})
	require.NoError(t, err)
}

// finish ends attempts as the runner listener does: decided by the queue,
// applied by the store.
func finish(s *store.Store) *queue.Finisher { return &queue.Finisher{Store: s} }

// exitedZero is the outcome of each leased job's attempt exiting 0 on r.
func exitedZero(r uuid.UUID, leased []record.Job) []record.Outcome {
	zero := 0
	outcomes := make([]record.Outcome, len(leased))
	for i, l := range leased {
		outcomes[i] = record.Outcome{JobID: l.ID, Attempt: l.Attempt, RunnerID: r, ExitCode: &zero}
	}
	return outcomes
}

// sweepOptions are the rules one sweep applies, and sweepResult counts what
// it did: one pass of each of the maintenance services' duties, as they run
// them (controlplane/maintenance), in their order, each in a transaction of
// its own. An expired lease is decided by the queue's policy, without its
// backoff: a requeued job may be leased again at once.
type sweepOptions struct {
	Now                      *time.Time // nil: the database's clock
	DefaultQueueTimeoutHours int
	Batch                    int
	LeasesOnly               bool // only the lease rescuer's duty
	SkipTimeouts             bool
	UnplaceableSince         time.Time // the blocked check reads jobs submitted since (zero: all)
}

type sweepResult struct {
	Requeued, Failed, Expired, Blocked, Unblocked int
	BlockedCut                                    bool
}

func (b jobsBundle) sweep(ctx context.Context, o sweepOptions) (sweepResult, error) {
	var res sweepResult
	err := b.store.WithTx(ctx, func(tx *store.Tx) error {
		jobs, err := tx.ExpiredLeases(ctx, o.Now, o.Batch)
		if err != nil {
			return err
		}
		now := time.Now()
		if o.Now != nil {
			now = *o.Now
		}
		rescues := make([]store.LeaseRescue, len(jobs))
		for i, j := range jobs {
			t := queue.DecideExpiredLease(j.Job, now)
			if t.AvailableAt != nil {
				t.AvailableAt = &now
			}
			rescues[i] = store.LeaseRescue{Job: j.Job, Transition: t}
		}
		rescued, err := tx.RescueLeases(ctx, rescues)
		res.Requeued, res.Failed = rescued.Requeued, rescued.Failed
		return err
	})
	if err != nil || o.LeasesOnly {
		return res, err
	}
	if !o.SkipTimeouts {
		if res.Expired, err = b.store.ExpireTimedOut(ctx, o.Now, o.DefaultQueueTimeoutHours, o.Batch); err != nil {
			return res, err
		}
	}
	blocked, err := b.store.BlockUnplaceable(ctx, o.UnplaceableSince, o.Batch)
	if err != nil {
		return res, err
	}
	res.Blocked, res.BlockedCut = blocked.Blocked, blocked.Cut
	res.Unblocked, err = b.store.UnblockPlaceable(ctx, o.Batch)
	return res, err
}

func anything(runner uuid.UUID) record.ClaimRequest {
	big := record.Claim{Cores: 1e6, MemoryMiB: 1 << 40, GPUs: 64}
	return record.ClaimRequest{RunnerID: runner, Kinds: []string{"default"}, Free: big, Largest: big, DefaultLeaseSeconds: 30}
}

func TestConcurrentClaimersNeverShareAJob(t *testing.T) {
	t.Parallel()
	b := jobsSetup(t)
	const jobs, claimers = 200, 8
	for range jobs {
		b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	}
	var runners []uuid.UUID
	for range claimers {
		runners = append(runners, b.runner(t, 1000, 1<<20, 0))
	}
	var mu sync.Mutex
	seen := map[uuid.UUID]uuid.UUID{}
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Go(func() {
			for {
				j, ok, err := b.store.ClaimJob(context.Background(), anything(r))
				require.NoError(t, err)
				if !ok {
					return
				}
				mu.Lock()
				prev, dup := seen[j.ID]
				seen[j.ID] = r
				mu.Unlock()
				require.False(t, dup, "job %s leased by %s and %s", j.ID, prev, r)
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, jobs)
}

func TestPlacementRespectsCapacityBookingsAndKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 2)
	big := b.submit(t, record.Claim{Cores: 4, GPUs: 2, WallClockSeconds: 60}, func(n *store.NewJob) { n.Priority = 10 })
	b.submit(t, record.Claim{Cores: 4, GPUs: 1, WallClockSeconds: 60})
	cpu := b.submit(t, record.Claim{Cores: 4, WallClockSeconds: 60})
	other := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.Kind = "batch" })
	withMemory := b.submit(t, record.Claim{Cores: 1, MemoryMiB: 100, WallClockSeconds: 60})

	got, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, big.ID, got.ID, "priority first")
	require.Equal(t, 1, got.Attempt)
	// Both GPUs are booked now: the 1-GPU job does not fit, the CPU job does.
	got, ok, err = b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, cpu.ID, got.ID)
	// 8 cores booked: nothing else fits.
	_, ok, err = b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.False(t, ok)

	r2 := b.runner(t, 8, 65536, 0)
	req := anything(r2)
	req.Kinds = []string{"batch"}
	got, ok, err = b.store.ClaimJob(ctx, req)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, other.ID, got.ID, "only its kinds")
	// The memory claim waits for a runner that enforces memory limits.
	_, ok, err = b.store.ClaimJob(ctx, anything(r2))
	require.NoError(t, err)
	require.False(t, ok)
	j, err := b.store.Job(ctx, record.AllOrganisations(), withMemory.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobQueued, j.State)
}

func TestStaleAttemptsAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	first, _, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)

	// The lease expires; the sweeper requeues; a second attempt begins.
	past := time.Now().Add(time.Hour)
	res, err := b.sweep(ctx, sweepOptions{Now: &past, DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	req := anything(r)
	req.Now = &past
	second, ok, err := b.store.ClaimJob(ctx, req)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, second.Attempt)

	zero := 0
	_, err = finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: first.Attempt, RunnerID: r, ExitCode: &zero})
	require.ErrorIs(t, err, store.ErrStaleAttempt)
	require.ErrorIs(t, b.store.AppendLog(ctx, j.ID, first.Attempt, r, 0, []byte("late")), store.ErrStaleAttempt)
	now, err := b.store.Job(ctx, record.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobLeased, now.State)
	logs, err := b.store.JobLogs(ctx, j.ID, 0, -1, 100)
	require.NoError(t, err)
	require.Empty(t, logs)

	// The current attempt is accepted, once.
	require.NoError(t, b.store.AppendLog(ctx, j.ID, 2, r, 0, []byte("hello\n")))
	fin, err := finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: 2, RunnerID: r, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, queue.Finished{State: record.JobSucceeded}, fin)
	// Sent again, it is recognised as recorded, and changes nothing.
	fin, err = finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: 2, RunnerID: r, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, queue.Finished{State: record.JobSucceeded, AlreadyRecorded: true}, fin)
	// From another runner, or for the attempt whose lease was taken back,
	// it is stale.
	_, err = finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: 2, RunnerID: uuid.New(), ExitCode: &zero})
	require.ErrorIs(t, err, store.ErrStaleAttempt)
	_, err = finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: first.Attempt, RunnerID: r, ExitCode: &zero})
	require.ErrorIs(t, err, store.ErrStaleAttempt)

	events, err := b.store.JobEvents(ctx, j.ID, 0)
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"SUBMITTED", "LEASED", "LEASE_EXPIRED", "LEASED", "SUCCEEDED"}, types)
}

func TestExpiredLeasesFailAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.MaxAttempts = 2 })
	at := time.Now()
	for attempt := 1; attempt <= 2; attempt++ {
		b.leaseAndLetExpire(t, r, &at, attempt)
	}
	got, err := b.store.Job(ctx, record.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobFailed, got.State)
	require.Equal(t, "lease of attempt 2 expired; 2 of 2 attempts used", got.StateReason)
	// Each attempt's run ends with the lease, not with a report.
	runs, err := b.store.JobRunsForJobs(ctx, []uuid.UUID{j.ID})
	require.NoError(t, err)
	require.Len(t, runs[j.ID], 2)
	for _, run := range runs[j.ID] {
		require.NotNil(t, run.FinishedAt, "attempt %d", run.Attempt)
		require.Equal(t, "lease expired", *run.ReturnReason, "attempt %d", run.Attempt)
		require.Nil(t, run.ExitCode)
	}
}

func TestBlockedAndExpiredJobsSayWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	b.runner(t, 8, 65536, 2)
	huge := b.submit(t, record.Claim{Cores: 1, GPUs: 4, WallClockSeconds: 60})
	fits := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})
	res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 1, res.Blocked)
	got, err := b.store.Job(ctx, record.AllOrganisations(), huge.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobBlocked, got.State)
	require.Equal(t, "no approved runner of the pool could ever hold 1 cores, 0 MiB and 4 GPUs", got.StateReason)

	// A bigger runner arrives: it is queued again.
	b.runner(t, 8, 65536, 8)
	res, err = b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 1, res.Unblocked)

	later := time.Now().Add(25 * time.Hour)
	res, err = b.sweep(ctx, sweepOptions{Now: &later, DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 2, res.Expired)
	got, err = b.store.Job(ctx, record.AllOrganisations(), fits.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobExpired, got.State)
	require.Equal(t, "waited longer than the pool's queue timeout", got.StateReason)
}

func TestIdempotencyKeyReturnsTheSameJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	key := "build-42"
	first := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.IdempotencyKey = &key })
	again, created, err := b.store.SubmitJob(ctx, record.AllOrganisations(), store.NewJob{
		PoolID: b.pool.ID, Image: "other", Claim: record.Claim{Cores: 2, WallClockSeconds: 1}, MaxAttempts: 1, Kind: "default", IdempotencyKey: &key})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, "busybox", again.Image)

	// Another organisation's pool is out of scope: nothing is queued.
	other, err := b.store.CreateOrganisation(ctx, "other")
	require.NoError(t, err)
	_, _, err = b.store.SubmitJob(ctx, record.OneOrganisation(other.ID), store.NewJob{PoolID: b.pool.ID, Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: "default"})
	require.ErrorIs(t, err, record.ErrNotFound)
	jobs, err := b.store.Jobs(ctx, record.AllOrganisations(), record.JobFilter{}, record.Page{Limit: 100})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_ = fmt.Sprint
}

func TestJobsClaimedTogetherFitTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	var want []uuid.UUID
	for i := range 5 {
		j := b.submit(t, record.Claim{Cores: 3, WallClockSeconds: 60}, func(n *store.NewJob) { n.Priority = 10 - i })
		want = append(want, j.ID)
	}
	got, err := b.store.ClaimJobs(ctx, anything(r), 16)
	require.NoError(t, err)
	require.Len(t, got, 2, "three 3-core jobs would not fit 8 cores")
	require.Equal(t, []uuid.UUID{want[0], want[1]}, []uuid.UUID{got[0].ID, got[1].ID}, "the best ones")
	// The free room the runner reports bounds it too.
	r2 := b.runner(t, 64, 65536, 0)
	req := anything(r2)
	req.Free.Cores = 4
	got, err = b.store.ClaimJobs(ctx, req, 16)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

// A claim stops where its jobs' specs would pass the bound the answer
// has, measured as PostgreSQL writes them out (at least the bytes that
// submission counted), and leaves the rest queued as they were.
func TestJobsClaimedTogetherFitTheAnswersSpecBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	var ids []uuid.UUID
	for range 8 {
		j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) {
			n.Command = []string{"sh", "-c", `echo "hi"`}
			n.Env = map[string]string{"A": strings.Repeat("v", 1000)}
		})
		ids = append(ids, j.ID)
	}
	var measured int64
	require.NoError(t, b.db.QueryRow(ctx, `SELECT octet_length(image) + octet_length(command::text) + octet_length(env::text)
		FROM jobs WHERE id = $1`, ids[0]).Scan(&measured))
	counted := int64(len("busybox") + len("sh") + len("-c") + len(`echo "hi"`) + len("A") + 1000)
	require.Greater(t, measured, counted, "escaped and delimited, the text is longer than what submission counted")

	queued := func() []uuid.UUID {
		var q []uuid.UUID
		rows, err := b.db.Query(ctx, `SELECT id FROM jobs WHERE state = 'QUEUED' AND attempt = 0
			AND (SELECT count(*) FROM job_events e WHERE e.job_id = jobs.id) = 1 ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var id uuid.UUID
			require.NoError(t, rows.Scan(&id))
			q = append(q, id)
		}
		require.NoError(t, rows.Err())
		return q
	}
	for _, c := range []struct {
		bound int64
		want  int
	}{{2*measured - 1, 1}, {3 * measured, 3}} {
		req := anything(b.runner(t, 64, 65536, 0))
		req.SpecBytes = c.bound
		before := queued()
		got, err := b.store.ClaimJobs(ctx, req, 16)
		require.NoError(t, err)
		require.Equal(t, c.want, len(got), "bound %d", c.bound)
		require.Equal(t, before[c.want:], queued(), "the rest stay queued, untouched")
		for i, j := range got {
			require.Equal(t, before[i], j.ID, "the best first")
		}
	}
	got, err := b.store.ClaimJobs(ctx, anything(b.runner(t, 64, 65536, 0)), 16)
	require.NoError(t, err)
	require.Len(t, got, 4, "no bound: all the rest")
}

// A runner holds at most MaxHeld jobs at once: a claim takes only what
// makes up the difference, and none once it is reached.
func TestAClaimKeepsWhatARunnerHoldsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	for range 10 {
		b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	}
	req := anything(b.runner(t, 64, 65536, 0))
	req.MaxHeld = 5
	for _, want := range []int{3, 2, 0} {
		got, err := b.store.ClaimJobs(ctx, req, 3)
		require.NoError(t, err)
		require.Len(t, got, want)
	}
	var queued int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 'QUEUED'`).Scan(&queued))
	require.Equal(t, 5, queued)
}

// Ended attempts record what their runner reported, exactly: zeros stay
// zeros, extremes stay themselves, and what it left out stays NULL. A
// requeue's time is kept, and so is the job's own where the transition
// names none.
func TestEndedAttemptsRecordWhatWasReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 64, 65536, 0)
	leased := b.leased(t, r, 3)
	zero, lowest, most, reason, digest, version := 0, math.MinInt32, int64(math.MaxInt64), "image would not pull", "sha256:ab", "v1"
	none := int64(0)
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
	outcomes := []record.Outcome{
		{JobID: leased[0].ID, Attempt: 1, RunnerID: r, ExitCode: &zero, PeakMemoryMiB: &none, ImageDigest: &digest, RunnerVersion: &version},
		{JobID: leased[1].ID, Attempt: 1, RunnerID: r, ReturnReason: &reason, HostFault: true},
		{JobID: leased[2].ID, Attempt: 1, RunnerID: r, ExitCode: &lowest, OOM: true, PeakMemoryMiB: &most},
	}
	endings := make([]store.Ending, len(outcomes))
	for i, o := range outcomes {
		endings[i] = store.Ending{Outcome: o, Transition: store.Transition{State: record.JobFailed, Reason: "exit"}}
		if o.ReturnReason != nil {
			endings[i].Transition = store.Transition{State: record.JobQueued, Reason: "given back", AvailableAt: &later}
		}
	}
	var availableBefore time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT available_at FROM jobs WHERE id = $1`, leased[2].ID).Scan(&availableBefore))
	ended, err := b.store.EndAttempts(ctx, r, endings)
	require.NoError(t, err)
	require.Len(t, ended, len(outcomes))
	for _, o := range outcomes {
		stored, err := b.store.Job(ctx, record.AllOrganisations(), o.JobID)
		require.NoError(t, err)
		require.Equal(t, stored.State, ended[o.JobID].State, "the state as answered is the state stored")
	}
	require.Equal(t, []record.JobState{record.JobFailed, record.JobQueued, record.JobFailed},
		[]record.JobState{ended[leased[0].ID].State, ended[leased[1].ID].State, ended[leased[2].ID].State})
	rows, err := b.db.Query(ctx, `SELECT coalesce(exit_code::text, 'NULL'), coalesce(return_reason, 'NULL'), host_fault, oom,
			coalesce(peak_memory_mib::text, 'NULL'), coalesce(image_digest, 'NULL'), coalesce(runner_version, 'NULL')
		FROM job_runs WHERE job_id = ANY($1::uuid[]) ORDER BY job_id`, []uuid.UUID{leased[0].ID, leased[1].ID, leased[2].ID})
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var exit, why, peak, dig, ver string
		var fault, oom bool
		require.NoError(t, rows.Scan(&exit, &why, &fault, &oom, &peak, &dig, &ver))
		got = append(got, fmt.Sprintf("%s %s %t %t %s %s %s", exit, why, fault, oom, peak, dig, ver))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"0 NULL false false 0 sha256:ab v1",
		"NULL image would not pull true false NULL NULL NULL",
		"-2147483648 NULL false true 9223372036854775807 NULL NULL",
	}, got)
	var requeuedAt, keptAt time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT (SELECT available_at FROM jobs WHERE id = $1), (SELECT available_at FROM jobs WHERE id = $2)`,
		leased[1].ID, leased[2].ID).Scan(&requeuedAt, &keptAt))
	require.True(t, later.Equal(requeuedAt), "requeued for %v, not %v", later, requeuedAt)
	require.True(t, availableBefore.Equal(keptAt), "no time in the transition: the job's own stays")
}

func TestSubmitJobsKeepsOrderAndKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	seen, dup := "seen", "dup"
	before := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.IdempotencyKey = &seen })
	batch := make([]store.NewJob, 6)
	for i := range batch {
		batch[i] = store.NewJob{PoolID: b.pool.ID, Image: fmt.Sprintf("img-%d", i), Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: "default"}
	}
	batch[2].IdempotencyKey = &seen
	batch[3].IdempotencyKey, batch[4].IdempotencyKey = &dup, &dup

	got, created, err := b.store.SubmitJobs(ctx, record.AllOrganisations(), batch)
	require.NoError(t, err)
	require.Len(t, got, 6)
	require.Equal(t, before.ID, got[2].ID, "a key the pool has seen returns its job")
	require.Equal(t, got[3].ID, got[4].ID, "one key twice in a batch makes one job")
	require.Equal(t, []bool{true, true, false, true, false, true}, created)
	for _, i := range []int{0, 1, 3, 5} {
		require.Equal(t, fmt.Sprintf("img-%d", i), got[i].Image)
		events, err := b.store.JobEvents(ctx, got[i].ID, 0)
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.Equal(t, "SUBMITTED", events[0].Type)
	}
	events, err := b.store.JobEvents(ctx, before.ID, 0)
	require.NoError(t, err)
	require.Len(t, events, 1, "the job made before gets no second SUBMITTED")

	// Equal priority leases in the order given, the earlier job first.
	r := b.runner(t, 64, 65536, 0)
	claimed, err := b.store.ClaimJobs(ctx, anything(r), 16)
	require.NoError(t, err)
	var order []uuid.UUID
	for _, j := range claimed {
		order = append(order, j.ID)
	}
	require.Equal(t, []uuid.UUID{before.ID, got[0].ID, got[1].ID, got[3].ID, got[5].ID}, order)
}

// A submitted job's spec is stored exactly as given, whatever its texts
// hold (commands travel as array literals), and who submitted it stays
// unknown where it was.
func TestSubmittedJobsKeepTheirSpecExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	digest := sha256.Sum256([]byte("submitter"))
	a, err := b.store.CreateAdminWithToken(ctx, store.NewAdmin{Name: "submitter", Role: record.RoleOrgAdmin, OrganisationID: &b.org.ID, TokenHash: digest[:]})
	require.NoError(t, err)
	admin := a.ID
	odd := []string{"a,b", `"q"`, `back\slash`, `\"`, "NULL", "", "{x}", " spaced ", "ünï", "}", "{"}
	given := []store.NewJob{
		{PoolID: b.pool.ID, Image: "img", Command: odd, Env: map[string]string{"A": `"{x}"\`, "B": ""},
			Claim: record.Claim{Cores: 0.5, MemoryMiB: 3, GPUs: 1, WallClockSeconds: 7}, Priority: -2, MaxAttempts: 4, Kind: "default", SubmittedBy: &admin},
		{PoolID: b.pool.ID, Image: "img", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: "default"},
	}
	got, _, err := b.store.SubmitJobs(ctx, record.AllOrganisations(), given)
	require.NoError(t, err)
	for i, j := range got {
		read, err := b.store.Job(ctx, record.AllOrganisations(), j.ID)
		require.NoError(t, err)
		require.Equal(t, j, read, "as returned, as stored")
		want := given[i]
		if want.Command == nil {
			want.Command = []string{}
		}
		if want.Env == nil {
			want.Env = map[string]string{}
		}
		require.Equal(t, want.Command, read.Command)
		require.Equal(t, want.Env, read.Env)
		require.Equal(t, want.SubmittedBy, read.SubmittedBy)
		require.Equal(t, want.Claim, read.Claim)
		require.Equal(t, want.Priority, read.Priority)
		require.Equal(t, want.MaxAttempts, read.MaxAttempts)
	}
}

func TestSubmitJobsRefusesWholeBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	otherPool, err := b.store.CreatePool(ctx, record.NewPool{OrganisationID: &b.org.ID, Name: "cpu"})
	require.NoError(t, err)
	ok := store.NewJob{PoolID: b.pool.ID, Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: "default"}
	stray := ok
	stray.PoolID = otherPool.ID
	_, _, err = b.store.SubmitJobs(ctx, record.AllOrganisations(), []store.NewJob{ok, stray})
	require.ErrorIs(t, err, record.ErrInvalid)
	emptyKey, empty := ok, "" // the stand-in for no key is no key
	emptyKey.IdempotencyKey = &empty
	nobody, nilUUID := ok, uuid.Nil // the stand-in for no submitter
	nobody.SubmittedBy = &nilUUID
	wide := ok // parameters travel as int32
	wide.Priority = 1 << 32
	notUTF8 := ok
	notUTF8.Command = []string{"\xff"}
	for _, bad := range []store.NewJob{emptyKey, nobody, wide, notUTF8} {
		_, _, err = b.store.SubmitJobs(ctx, record.AllOrganisations(), []store.NewJob{ok, bad})
		require.ErrorIs(t, err, record.ErrInvalid)
	}

	outsider, err := b.store.CreateOrganisation(ctx, "outsider")
	require.NoError(t, err)
	_, _, err = b.store.SubmitJobs(ctx, record.OneOrganisation(outsider.ID), []store.NewJob{ok, ok})
	require.ErrorIs(t, err, record.ErrNotFound)

	jobs, err := b.store.Jobs(ctx, record.AllOrganisations(), record.JobFilter{}, record.Page{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, jobs, "a refused batch queues nothing")
}

// What the API checks is checked again below it, and a refused job leaves
// nothing behind: a kind outside the pattern (the job row's own check,
// which lets the default kind skip the pattern), and a pool that does not
// exist (the jobs table has no foreign key to pools: the store reads the
// pool in the submitting transaction).
func TestTheStoreRefusesBadKindsAndUnknownPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	for _, kind := range []string{"Batch", "-x", "a b", strings.Repeat("k", 64), ""} {
		n := store.NewJob{PoolID: b.pool.ID, Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: kind}
		_, _, err := b.store.SubmitJob(ctx, record.AllOrganisations(), n)
		require.ErrorIs(t, err, record.ErrInvalid, "kind %q", kind)
	}
	n := store.NewJob{PoolID: uuid.New(), Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: "default"}
	_, _, err := b.store.SubmitJob(ctx, record.AllOrganisations(), n)
	require.ErrorIs(t, err, record.ErrNotFound)
	jobs, err := b.store.Jobs(ctx, record.AllOrganisations(), record.JobFilter{}, record.Page{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, jobs)
	for _, kind := range []string{"default", "gpu.a100", "x"} {
		n := store.NewJob{PoolID: b.pool.ID, Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 1}, MaxAttempts: 1, Kind: kind}
		_, _, err := b.store.SubmitJob(ctx, record.AllOrganisations(), n)
		require.NoError(t, err, "kind %q", kind)
	}
}

// A request for work is recorded, but rewritten only once the record is 30
// seconds old: most requests write nothing.
func TestTouchWorkRequestWritesAtMostEvery30Seconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	seen := func() time.Time {
		got, err := b.store.Runner(ctx, record.AllOrganisations(), r)
		require.NoError(t, err)
		require.NotNil(t, got.LastWorkRequestAt)
		return *got.LastWorkRequestAt
	}
	_, err := b.store.TouchWorkRequest(ctx, r, []string{"default"})
	require.NoError(t, err)
	first := seen()
	_, err = b.store.TouchWorkRequest(ctx, r, []string{"default"})
	require.NoError(t, err)
	require.Equal(t, first, seen(), "a second request within 30 s writes nothing")
	_, err = b.db.Exec(ctx, `UPDATE runners SET last_work_request_at = now() - interval '31 seconds' WHERE id = $1`, r)
	require.NoError(t, err)
	_, err = b.store.TouchWorkRequest(ctx, r, []string{"default"})
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), seen(), 10*time.Second, "an older record is rewritten")
}

// A lease that never reached its runner goes back at once, fenced like a
// result, and is no try: the job keeps all its attempts.
func TestUndeliveredLeasesGoBackAndAreNoTry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r, other := b.runner(t, 8, 65536, 0), b.runner(t, 8, 65536, 0)
	j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.MaxAttempts = 2 })
	leased, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, leased.Attempt)

	// Another runner's, or another attempt's, return changes nothing.
	stale := leased
	stale.Attempt = 2
	for _, try := range []struct {
		runner uuid.UUID
		job    record.Job
	}{{other, leased}, {r, stale}} {
		n, err := b.store.ReturnUndelivered(ctx, try.runner, []record.Job{try.job}, "test")
		require.NoError(t, err)
		require.Zero(t, n)
	}
	got, err := b.store.Job(ctx, record.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobLeased, got.State)
	require.Zero(t, got.Undelivered)
	// Nor does the return of a lease its runner reported RUNNING: that one
	// was delivered.
	running := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	delivered, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, running.ID, delivered.ID)
	_, err = b.store.ExtendLeases(ctx, r, 60, []store.LeaseReport{{LeaseID: delivered.ID, Attempt: 1, Phase: "RUNNING"}})
	require.NoError(t, err)
	back, err := b.store.ReturnUndelivered(ctx, r, []record.Job{delivered}, "test")
	require.NoError(t, err)
	require.Zero(t, back)
	got, err = b.store.Job(ctx, record.AllOrganisations(), running.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobRunning, got.State)

	n, err := b.store.ReturnUndelivered(ctx, r, []record.Job{leased}, "test")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	// Twice is once.
	n, err = b.store.ReturnUndelivered(ctx, r, []record.Job{leased}, "test")
	require.NoError(t, err)
	require.Zero(t, n)
	got, err = b.store.Job(ctx, record.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobQueued, got.State)
	require.Nil(t, got.RunnerID)
	require.Nil(t, got.LeaseExpiresAt)
	require.Equal(t, 1, got.Attempt, "the number stays taken")
	require.Equal(t, 1, got.Undelivered)
	require.Zero(t, got.Tries())
	require.False(t, got.AvailableAt.After(time.Now()), "no backoff: it can run at once")
	runs, err := b.store.JobRunsForJobs(ctx, []uuid.UUID{j.ID})
	require.NoError(t, err)
	require.Len(t, runs[j.ID], 1)
	require.NotNil(t, runs[j.ID][0].FinishedAt)
	require.Equal(t, "not delivered", *runs[j.ID][0].ReturnReason)
	events, err := b.store.JobEvents(ctx, j.ID, 0)
	require.NoError(t, err)
	require.Len(t, events, 3)
	require.Equal(t, "REQUEUED", events[2].Type)
	require.Equal(t, 1, events[2].Attempt)
	require.Contains(t, events[2].Detail, "not delivered")

	// Both its tries are still to come: attempts 2 and 3. When their
	// leases run out, the first is requeued and the second fails it.
	at := time.Now()
	for attempt := 2; attempt <= 3; attempt++ {
		b.leaseAndLetExpire(t, r, &at, attempt)
		got, err = b.store.Job(ctx, record.AllOrganisations(), j.ID)
		require.NoError(t, err)
		if attempt == 2 {
			require.Equal(t, record.JobQueued, got.State, "1 of 2 tries used")
		}
	}
	require.Equal(t, record.JobFailed, got.State)
	require.Equal(t, "lease of attempt 3 expired; 2 of 2 attempts used", got.StateReason)

	// Cancelled while its lease was on the way: it ends CANCELLED.
	c := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	leased, ok, err = b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, c.ID, leased.ID)
	_, err = b.store.CancelJob(ctx, record.AllOrganisations(), c.ID)
	require.NoError(t, err)
	n, err = b.store.ReturnUndelivered(ctx, r, []record.Job{leased}, "test")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err = b.store.Job(ctx, record.AllOrganisations(), c.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobCancelled, got.State)
	require.NotNil(t, got.FinishedAt)
	events, err = b.store.JobEvents(ctx, c.ID, 0)
	require.NoError(t, err)
	require.Equal(t, "CANCELLED", events[len(events)-1].Type)
}

// Jobs that ended before the cutoff go with their events, runs and output,
// a batch at a time in id order; jobs still queued or held stay, however
// old, and so does everything of a job that ended after the cutoff.
func TestPruningTakesFinishedJobsAndAllTheyLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	zero := 0
	var finished []uuid.UUID
	for range 4 {
		j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
		_, ok, err := b.store.ClaimJob(ctx, anything(r))
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, b.store.AppendLog(ctx, j.ID, 1, r, 0, []byte("out\n")))
		_, err = finish(b.store).Finish(ctx, record.Outcome{JobID: j.ID, Attempt: 1, RunnerID: r, ExitCode: &zero})
		require.NoError(t, err)
		finished = append(finished, j.ID)
	}
	cancelled := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	_, err := b.store.CancelJob(ctx, record.AllOrganisations(), cancelled.ID)
	require.NoError(t, err)
	finished = append(finished, cancelled.ID)
	held := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	_, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	queued := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	// Submitted with the others, but ended (as if) two hours from now.
	late := finished[1]
	_, err = b.db.Exec(ctx, `UPDATE jobs SET finished_at = now() + interval '2 hours' WHERE id = $1`, late)
	require.NoError(t, err)
	kept := []uuid.UUID{held.ID, queued.ID, late}
	gone := []uuid.UUID{finished[0], finished[2], finished[3], cancelled.ID}

	rows := func(ids ...uuid.UUID) (n int) {
		require.NoError(t, b.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs WHERE id = ANY($1))
			+ (SELECT count(*) FROM job_events WHERE job_id = ANY($1)) + (SELECT count(*) FROM job_runs WHERE job_id = ANY($1))
			+ (SELECT count(*) FROM job_logs WHERE job_id = ANY($1))`, ids).Scan(&n))
		return n
	}
	keptRows := rows(kept...)

	// Kept an hour: all of them ended since.
	n, last, err := b.store.PruneJobs(ctx, time.Hour, uuid.Nil, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, uuid.Nil, last)
	// A walk goes on after the id it is given: from the last job ended,
	// nothing is left to take.
	n, _, err = b.store.PruneJobs(ctx, -time.Hour, cancelled.ID, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	// Cut off an hour from now: a batch at a time, oldest first, each
	// batch going on after the last.
	n, last, err = b.store.PruneJobs(ctx, -time.Hour, uuid.Nil, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, finished[2], last, "the first two that ended before the cutoff")
	require.Zero(t, rows(finished[0], finished[2]), "with their events, runs and output")
	require.NotZero(t, rows(finished[3]))
	n, last, err = b.store.PruneJobs(ctx, -time.Hour, last, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, cancelled.ID, last)
	require.Zero(t, rows(gone...))
	require.Equal(t, keptRows, rows(kept...), "queued, held and later-ended jobs stay, with all they have")
	n, _, err = b.store.PruneJobs(ctx, -time.Hour, uuid.Nil, 2)
	require.NoError(t, err)
	require.Zero(t, n)
}

// Jobs inserted without an id get a UUIDv7 from the database, in time
// order with the store's: the pruning's walk finds them too.
func TestJobIdsAreTimeOrdered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	before := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	nextMillisecond(t) // a UUIDv7 orders by the millisecond only
	var id uuid.UUID
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds)
		VALUES ($1, 'x', 1, 0, 0, 60) RETURNING id`, b.pool.ID).Scan(&id))
	nextMillisecond(t)
	after := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	require.Equal(t, uuid.Version(7), id.Version())
	require.Equal(t, uuid.RFC4122, id.Variant())
	require.Less(t, before.ID.String(), id.String())
	require.Less(t, id.String(), after.ID.String())
}

// Undelivered leases are forgiven up to three: a job whose answers keep
// getting lost still comes to an end.
func TestTriesForgiveThreeUndeliveredLeases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ attempt, undelivered, tries int }{{1, 0, 1}, {3, 2, 1}, {4, 3, 1}, {10, 5, 7}} {
		require.Equal(t, c.tries, record.Job{Attempt: c.attempt, Undelivered: c.undelivered}.Tries(), "%+v", c)
	}
}

// Finished jobs pile up for their retention. What runs all the time (the
// sweeper's passes, /metrics) or on demand (job lists) reaches the jobs it
// needs through indexes: it neither reads the whole table nor steps through
// the jobs of other pools.
func TestSweepsAndListsDoNotReadEveryJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	_, err := b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, state, finished_at)
		SELECT $1, 'x', 1, 0, 0, 60, 'SUCCEEDED', now() FROM generate_series(1, 20000)`, b.pool.ID)
	require.NoError(t, err)
	for range 3 {
		b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	}
	b.submit(t, record.Claim{Cores: 1, GPUs: 4, WallClockSeconds: 60}) // blocked by the sweep below
	_, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	// A quiet pool of the same organisation.
	quiet, err := b.store.CreatePool(ctx, record.NewPool{OrganisationID: &b.org.ID, Name: "quiet"})
	require.NoError(t, err)
	for range 3 {
		b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.PoolID = quiet.ID })
	}
	_, err = b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		scans0, rows0, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		for range 2 { // the second sweep finds a blocked job to unblock, or not
			res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
			require.NoError(t, err)
			t.Logf("sweep: %+v", res)
		}
		counts, err := tx.PoolJobCounts(ctx) // what /metrics reads at every scrape
		require.NoError(t, err)
		require.Len(t, counts, 2)
		for _, c := range counts {
			if c.Pool == b.pool.Name {
				require.Equal(t, map[record.JobState]int64{record.JobQueued: 2, record.JobBlocked: 1, record.JobLeased: 1, record.JobRunning: 0}, c.Jobs)
			}
		}
		for _, l := range []struct {
			scope record.Scope
			f     record.JobFilter
			n     int
		}{
			{record.AllOrganisations(), record.JobFilter{}, 100},
			{record.AllOrganisations(), record.JobFilter{PoolID: &b.pool.ID}, 100},
			{record.AllOrganisations(), record.JobFilter{PoolID: &quiet.ID}, 3},
			{record.OneOrganisation(b.org.ID), record.JobFilter{}, 100},
			{record.OneOrganisation(b.org.ID), record.JobFilter{PoolID: &quiet.ID}, 3},
		} {
			jobs, err := tx.Jobs(ctx, l.scope, l.f, record.Page{Limit: 100})
			require.NoError(t, err)
			require.Len(t, jobs, l.n)
		}
		scans, rows, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		require.Equal(t, scans0, scans, "full reads of the jobs table")
		require.Less(t, rows-rows0, int64(1000), "rows read, with 20,000 finished jobs kept")
		t.Logf("%d rows read", rows-rows0)
		return nil
	}))
}

// A job list shows the jobs of the scope's organisation only, whichever
// way it is narrowed; a scope of no organisation shows none.
func TestJobListsKeepToTheirScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	held := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	_, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	mine := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	other, err := b.store.CreateOrganisation(ctx, "other")
	require.NoError(t, err)
	otherPool, err := b.store.CreatePool(ctx, record.NewPool{OrganisationID: &other.ID, Name: "gpu"})
	require.NoError(t, err)
	theirs := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.PoolID = otherPool.ID })
	ids := func(scope record.Scope, f record.JobFilter) (out []uuid.UUID) {
		jobs, err := b.store.Jobs(ctx, scope, f, record.Page{Limit: 100})
		require.NoError(t, err)
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	require.Equal(t, []uuid.UUID{theirs.ID, mine.ID, held.ID}, ids(record.AllOrganisations(), record.JobFilter{}), "newest first")
	require.Equal(t, []uuid.UUID{mine.ID, held.ID}, ids(record.OneOrganisation(b.org.ID), record.JobFilter{}), "held jobs too")
	leased := record.JobLeased
	require.Equal(t, []uuid.UUID{held.ID}, ids(record.OneOrganisation(b.org.ID), record.JobFilter{State: &leased}))
	require.Equal(t, []uuid.UUID{theirs.ID}, ids(record.OneOrganisation(other.ID), record.JobFilter{}))
	require.Empty(t, ids(record.OneOrganisation(b.org.ID), record.JobFilter{PoolID: &otherPool.ID}), "another organisation's pool")
	require.Equal(t, []uuid.UUID{theirs.ID}, ids(record.AllOrganisations(), record.JobFilter{PoolID: &otherPool.ID}))
	require.Empty(t, ids(record.Scope{}, record.JobFilter{}), "no organisation")
	queued := record.JobQueued
	require.Equal(t, []uuid.UUID{mine.ID}, ids(record.OneOrganisation(b.org.ID), record.JobFilter{State: &queued}))
}

// Each runner's newest certificate, by expiry, whatever the order they
// were stored in; a runner without one is absent.
func TestLatestCertificatesAreEachRunnersNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r1, r2, none := b.runner(t, 1, 1024, 0), b.runner(t, 1, 1024, 0), b.runner(t, 1, 1024, 0)
	now := time.Now().UTC().Truncate(time.Second)
	for _, c := range []struct {
		serial string
		runner uuid.UUID
		after  time.Duration
	}{{"a1", r1, 2 * time.Hour}, {"a2", r1, 3 * time.Hour}, {"a0", r1, time.Hour}, {"b1", r2, time.Hour}} {
		require.NoError(t, b.store.StoreCertificate(ctx, record.Certificate{Serial: c.serial, RunnerID: &c.runner, DER: []byte{1},
			NotBefore: now, NotAfter: now.Add(c.after)}))
	}
	got, err := b.store.LatestCertificates(ctx, []uuid.UUID{r1, r2, none})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "a2", got[r1].Serial)
	require.Equal(t, "b1", got[r2].Serial)
}

// Certificates that expired longer ago than the retention go, with their
// revocations, except each runner's newest; a pruned serial counts as
// revoked. Nothing else changes.
func TestExpiredCertificatesArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r1, r2 := b.runner(t, 1, 1024, 0), b.runner(t, 1, 1024, 0)
	now := time.Now().UTC().Truncate(time.Second)
	day := 24 * time.Hour
	for _, c := range []struct {
		serial string
		runner *uuid.UUID
		after  time.Duration // not_after from now
	}{
		{"old1", &r1, -40 * day}, {"old2", &r1, -35 * day}, {"recent", &r1, -10 * day}, {"valid", &r1, day},
		{"last", &r2, -40 * day}, // r2's newest, though long expired
		{"listener-old", nil, -40 * day}, {"listener", nil, day},
	} {
		require.NoError(t, b.store.StoreCertificate(ctx, record.Certificate{Serial: c.serial, RunnerID: c.runner, DER: []byte{1},
			NotBefore: now.Add(c.after - day), NotAfter: now.Add(c.after)}))
	}
	expired, lastExpired := now.Add(-35*day), now.Add(-40*day)
	recent := now.Add(-10 * day)
	for _, v := range []store.Revocation{{Serial: "old2", ExpiresAt: &expired}, {Serial: "recent", ExpiresAt: &recent},
		{Serial: "never-expires"}, {Serial: "last", ExpiresAt: &lastExpired}} {
		_, err := b.store.RevokeCertificate(ctx, store.Revocation{Serial: v.Serial, RevokedAt: now, ExpiresAt: v.ExpiresAt})
		require.NoError(t, err)
	}
	serials := func(table string) []string { return texts(t, b.db, "SELECT serial FROM "+table+" ORDER BY serial") }

	certs, revs, err := b.store.PruneCertificates(ctx, 30*day, 2)
	require.NoError(t, err)
	require.Equal(t, 2, certs, "at most the batch")
	require.Equal(t, 0, revs, "old2's revocation went with it or waits for the next batch")
	certs2, revs2, err := b.store.PruneCertificates(ctx, 30*day, 1000)
	require.NoError(t, err)
	require.Equal(t, 3, certs+certs2)
	require.Equal(t, 1, revs+revs2)
	require.Equal(t, []string{"last", "listener", "recent", "valid"}, serials("certificates"))
	// last's revocation stays with last: without it, last would read as
	// not revoked.
	require.Equal(t, []string{"last", "never-expires", "recent"}, serials("certificate_revocations"))
	st, err := b.store.StandingOf(ctx, "old2")
	require.NoError(t, err)
	require.False(t, st.Usable(), "a pruned serial counts as revoked")
	again, _, err := b.store.PruneCertificates(ctx, 30*day, 1000)
	require.NoError(t, err)
	require.Zero(t, again)
}

// texts is the one text column of query's rows.
func texts(t *testing.T, db *pgxpool.Pool, query string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), query)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// Audit entries older than the retention go, oldest first, a batch at a
// time; newer ones stay.
func TestOldAuditEntriesArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	_, err := b.db.Exec(ctx, `
		INSERT INTO audit_log (at, actor_name, actor_role, action, outcome)
		SELECT now() - make_interval(days => d), 'a', 'PLATFORM_ADMIN', 'act' || d, 'ok'
		FROM unnest(ARRAY[366, 1, 400, 300, 380]) AS d`)
	require.NoError(t, err)
	actions := func() []string { return texts(t, b.db, `SELECT action FROM audit_log ORDER BY at`) }
	year := 365 * 24 * time.Hour
	n, err := b.store.PruneAudit(ctx, year, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"act366", "act300", "act1"}, actions(), "the oldest first")
	n, err = b.store.PruneAudit(ctx, year, 1000)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"act300", "act1"}, actions())
}

// The end of several jobs' output at once: whole chunks that fit in the
// tail, across attempts, in order, with each job's total; none for a job
// without output.
func TestJobLogsTailAcrossAttemptsAndJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	a, none, small := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}), b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}),
		b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	_, err := b.db.Exec(ctx, `INSERT INTO job_logs (job_id, attempt, seq, data) VALUES
		($1, 1, 0, 'aaaa'), ($1, 1, 1, 'bbbb'), ($1, 2, 0, 'cccc'), ($2, 1, 0, 'x')`, a.ID, small.ID)
	require.NoError(t, err)
	got, err := b.store.JobLogsForJobs(ctx, []uuid.UUID{a.ID, none.ID, small.ID}, 8)
	require.NoError(t, err)
	require.Equal(t, record.JobOutput{Bytes: 12, Chunks: []record.LogChunk{{Attempt: 1, Seq: 1, Data: []byte("bbbb")}, {Attempt: 2, Seq: 0, Data: []byte("cccc")}}}, got[a.ID])
	require.Equal(t, record.JobOutput{Chunks: []record.LogChunk{}}, got[none.ID])
	require.Equal(t, record.JobOutput{Bytes: 1, Chunks: []record.LogChunk{{Attempt: 1, Seq: 0, Data: []byte("x")}}}, got[small.ID])
	// A chunk that would pass the tail stays out.
	tight, err := b.store.JobLogsForJobs(ctx, []uuid.UUID{a.ID}, 7)
	require.NoError(t, err)
	require.Equal(t, record.JobOutput{Bytes: 12, Chunks: []record.LogChunk{{Attempt: 2, Seq: 0, Data: []byte("cccc")}}}, tight[a.ID])
}

// The blocked check limited to new jobs reads only those, so a sweep that
// leaves out the timeout check reads next to nothing of a deep queue; the
// timeout check alone reads all of it.
func TestTheBlockedCheckCanReadOnlyNewJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	b.runner(t, 8, 65536, 0)
	_, err := b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds)
		SELECT $1, 'x', 1, 0, 0, 60 FROM generate_series(1, 5000)`, b.pool.ID)
	require.NoError(t, err)
	old := b.submit(t, record.Claim{Cores: 16, WallClockSeconds: 60}) // fits no runner
	nextMillisecond(t)
	since := time.Now()
	nextMillisecond(t)
	fresh := b.submit(t, record.Claim{Cores: 16, WallClockSeconds: 60})
	_, err = b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	state := func(id uuid.UUID) record.JobState {
		j, err := b.store.Job(ctx, record.AllOrganisations(), id)
		require.NoError(t, err)
		return j.State
	}
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		_, rows0, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24, UnplaceableSince: since, SkipTimeouts: true})
		require.NoError(t, err)
		require.Equal(t, sweepResult{Blocked: 1}, res)
		_, rows, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		require.Less(t, rows-rows0, int64(100), "rows read with 5,000 jobs queued")
		t.Logf("%d rows read", rows-rows0)
		return nil
	}))
	require.Equal(t, record.JobBlocked, state(fresh.ID), "submitted since: checked")
	require.Equal(t, record.JobQueued, state(old.ID), "submitted before: left to the full check")
	res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 1, res.Blocked)
	require.Equal(t, record.JobBlocked, state(old.ID), "the full check")

	// Timeouts: left out when asked, applied otherwise.
	later := time.Now().Add(25 * time.Hour)
	for _, skip := range []bool{true, false} {
		res, err = b.sweep(ctx, sweepOptions{Now: &later, DefaultQueueTimeoutHours: 24, Batch: 10, UnplaceableSince: later,
			SkipTimeouts: skip})
		require.NoError(t, err)
		if skip {
			require.Zero(t, res.Expired)
		} else {
			require.Equal(t, 10, res.Expired)
		}
	}
}

// The claim reads the queue in its own order (jobs_queued) and stops at
// what it takes, even on a plan made while the queue was empty: another
// index over queued jobs, taken with such statistics, made every claim read
// and sort the whole queue.
func TestAClaimReadsTheQueueInOrderEvenOnStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 1e6, 1<<40, 0)
	// Statistics of an empty queue and a long history, then a burst.
	_, err := b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, state, finished_at)
		SELECT $1, 'x', 1, 0, 0, 60, 'SUCCEEDED', now() FROM generate_series(1, 5000)`, b.pool.ID)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds)
		SELECT $1, 'x', 1, 0, 0, 60 FROM generate_series(1, 20000)`, b.pool.ID)
	require.NoError(t, err)
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		_, err := tx.SetLocalForTest(ctx, "plan_cache_mode", "force_generic_plan")
		require.NoError(t, err)
		_, rows0, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		leased, err := tx.ClaimJobs(ctx, anything(r), 128)
		require.NoError(t, err)
		require.Len(t, leased, 128)
		_, rows, err := tx.JobsRead(ctx)
		require.NoError(t, err)
		t.Logf("%d rows read", rows-rows0)
		require.Less(t, rows-rows0, int64(2000), "rows read for 128 leases with 20,000 queued")
		return nil
	}))
}

// Jobs that do not fit the runner are passed over inside the queue index:
// a CPU runner's claim behind thousands of queued GPU jobs (waiting for a
// GPU runner) fetches the job it takes, not each GPU job's row first. So
// also for memory the runner cannot hold, or cannot enforce, for cores,
// for requeued jobs backing off at the head of the queue, and for kinds the
// runner does not run, on either side of its own.
func TestAClaimPassesOverJobsThatDoNotFitInTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	b.runner(t, 64, 1<<20, 8) // a GPU runner: every job below could run somewhere
	cpu := b.runner(t, 16, 65536, 0)
	_, err := b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, priority)
		SELECT $1::uuid, 'x', 1, 0, 1, 60, 10 FROM generate_series(1, 2000)  -- GPUs
		UNION ALL SELECT $1, 'x', 1, 262144, 0, 60, 10 FROM generate_series(1, 500)  -- more memory than it has
		UNION ALL SELECT $1, 'x', 1, 1024, 0, 60, 10 FROM generate_series(1, 500)  -- memory it cannot enforce
		UNION ALL SELECT $1, 'x', 32, 0, 0, 60, 10 FROM generate_series(1, 500)  -- more cores than it has`, b.pool.ID)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, priority, available_at)
		SELECT $1, 'x', 1, 0, 0, 60, 10, now() + interval '1 hour' FROM generate_series(1, 500)  -- backing off`, b.pool.ID)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, priority, kind)
		SELECT $1, 'x', 1, 0, 0, 60, 10, k FROM generate_series(1, 250), unnest(array['a100', 'zz']) AS k  -- other kinds`, b.pool.ID)
	require.NoError(t, err)
	fits := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}) // priority 0: last in the queue
	_, err = b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		entries0, fetched0, err := tx.JobIndexReads(ctx, "jobs_queued")
		require.NoError(t, err)
		req := anything(cpu)
		req.Largest = record.Claim{Cores: 16, MemoryMiB: 65536}
		req.Free = req.Largest
		leased, err := tx.ClaimJobs(ctx, req, 4)
		require.NoError(t, err)
		require.Len(t, leased, 1)
		require.Equal(t, fits.ID, leased[0].ID)
		entries, fetched, err := tx.JobIndexReads(ctx, "jobs_queued")
		require.NoError(t, err)
		t.Logf("jobs_queued: %d entries returned, %d rows fetched", entries-entries0, fetched-fetched0)
		require.Less(t, fetched-fetched0, int64(10), "rows fetched to lease 1 job behind 4,500 that do not fit or must wait")
		return nil
	}))
}

// A runner's claims and results read what they need, in order, whatever
// the planner knew when the connection first planned them: a jobs table
// never analyzed (a fresh install), or analyzed while empty (emptied, then
// a burst). Before, the first made bitmap scans of the queue, which read
// it whole and sorted it, and mark no dead entry, so each claim read every
// entry no vacuum had removed yet (3,712 for 128 leases here); the second
// read the whole table, and for each job leased walked its primary key.
func TestClaimsAndResultsReadWhatTheyNeed(t *testing.T) {
	t.Parallel()
	for _, analyzed := range []bool{false, true} {
		t.Run(map[bool]string{false: "never analyzed", true: "analyzed while empty"}[analyzed], func(t *testing.T) {
			t.Parallel()
			claimsAfterABurst(t, analyzed)
		})
	}
}

// reads is what one call read of the jobs table (see JobIndexReads).
type reads struct {
	fullScans            int64
	pkeyEntries          int64
	queueEntries, queued int64 // jobs_queued: entries read, rows fetched
}

func claimsAfterABurst(t *testing.T, analyzed bool) {
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 1e6, 1<<40, 0)
	// One connection, whose prepared statements keep the plans they made
	// first.
	conn, err := b.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	s := store.New(conn)
	if analyzed {
		_, err := conn.Exec(ctx, `VACUUM ANALYZE jobs`)
		require.NoError(t, err)
	}
	// measured runs f in a transaction planned as a connection does after
	// five runs, and returns what f read.
	measured := func(f func(ctx context.Context)) (got reads) {
		require.NoError(t, s.WithTx(ctx, func(tx *store.Tx) error {
			_, err := tx.SetLocalForTest(ctx, "plan_cache_mode", "force_generic_plan")
			require.NoError(t, err)
			read := func() (r reads) {
				var err error
				r.fullScans, _, err = tx.JobsRead(ctx)
				require.NoError(t, err)
				r.pkeyEntries, _, err = tx.JobIndexReads(ctx, "jobs_pkey")
				require.NoError(t, err)
				r.queueEntries, r.queued, err = tx.JobIndexReads(ctx, "jobs_queued")
				require.NoError(t, err)
				return r
			}
			before := read()
			f(ctx)
			after := read()
			got = reads{after.fullScans - before.fullScans, after.pkeyEntries - before.pkeyEntries,
				after.queueEntries - before.queueEntries, after.queued - before.queued}
			return nil
		}))
		return got
	}
	// leaseAndEnd claims n jobs and ends them; it returns what the claim
	// read and what the results read.
	leaseAndEnd := func(n int) (claimed, ended reads) {
		var leased []record.Job
		claimed = measured(func(ctx context.Context) {
			leased, err = s.ClaimJobs(ctx, anything(r), 128)
			require.NoError(t, err)
		})
		require.Len(t, leased, n)
		if n == 0 {
			return claimed, ended
		}
		outcomes := exitedZero(r, leased)
		ended = measured(func(ctx context.Context) {
			_, err := finish(s).FinishAll(ctx, r, outcomes)
			require.NoError(t, err)
		})
		return claimed, ended
	}
	leaseAndEnd(0) // the claim is planned on an empty queue
	// So is a heartbeat.
	measured(func(ctx context.Context) {
		_, err := s.ExtendLeases(ctx, r, 60, []store.LeaseReport{{LeaseID: uuid.New(), Attempt: 1, Phase: "RUNNING"}})
		require.NoError(t, err)
	})
	batch := make([]store.NewJob, store.MaxBatch)
	for i := range batch {
		batch[i] = store.NewJob{PoolID: b.pool.ID, Image: "x", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"}
	}
	// A first job alone: its results are planned on a table of one job.
	_, _, err = s.SubmitJobs(ctx, record.AllOrganisations(), batch[:1])
	require.NoError(t, err)
	leaseAndEnd(1)
	for range 4 {
		_, _, err := s.SubmitJobs(ctx, record.AllOrganisations(), batch)
		require.NoError(t, err)
	}
	for range 26 {
		leaseAndEnd(128)
	}
	claimed, ended := leaseAndEnd(128)
	// A heartbeat of four leases.
	held, err := s.ClaimJobs(ctx, anything(r), 4)
	require.NoError(t, err)
	reported := make([]store.LeaseReport, len(held))
	for i, h := range held {
		reported[i] = store.LeaseReport{LeaseID: h.ID, Attempt: h.Attempt, Phase: "RUNNING"}
	}
	beat := measured(func(ctx context.Context) {
		extended, err := s.ExtendLeases(ctx, r, 60, reported)
		require.NoError(t, err)
		require.Len(t, extended, 4)
	})
	t.Logf("after 3,457 jobs, a claim of 128 read %+v; their results read %+v; a heartbeat of 4 leases read %+v", claimed, ended, beat)
	require.Zero(t, beat.fullScans, "the heartbeat read the whole table")
	require.Less(t, beat.pkeyEntries, int64(64), "the heartbeat walked the primary key")
	require.Zero(t, claimed.fullScans, "the claim read the whole table")
	require.EqualValues(t, 128, claimed.queued, "the claim read the queue by an index scan, in order")
	// Leased jobs are found by id: an entry or a few each (their older
	// versions' entries until a vacuum).
	require.Less(t, claimed.pkeyEntries, int64(128*8), "the claim walked the primary key")
	require.Zero(t, ended.fullScans, "the results read the whole table")
}

// The hot statements' planner settings hold for the statement they are
// sent with, and end with it: they reach no other statement on the
// connection. An error in the statement is its caller's,
// and the pooled connection goes back.
func TestIndexScansOnlyHoldForTheirStatementAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	db, err := store.Connect(ctx, url+"&pool_max_conns=1")
	require.NoError(t, err)
	defer db.Close()
	s := store.New(db)
	const settings = `SELECT current_setting('enable_seqscan') || ',' || current_setting('enable_bitmapscan') || ','
		|| current_setting('plan_cache_mode')`
	for range 3 { // one connection: any leak would block the next call
		got, err := s.IndexScansOnlyForTest(ctx, settings)
		require.NoError(t, err)
		require.Equal(t, "off,off,force_generic_plan", got)
		var after string
		require.NoError(t, db.QueryRow(ctx, settings).Scan(&after))
		require.Equal(t, "on,on,auto", after, "the settings outlived their statement")

		rows, err := s.IndexScansOnlyRowsForTest(ctx, `SELECT g::text FROM generate_series(1, 3) g`)
		require.NoError(t, err)
		require.Equal(t, []string{"1", "2", "3"}, rows)
		_, err = s.IndexScansOnlyRowsForTest(ctx, `SELECT (1 / (g - 2))::text FROM generate_series(1, 3) g`)
		require.ErrorContains(t, err, "division by zero")
		_, err = s.IndexScansOnlyForTest(ctx, `SELECT 'x' WHERE false`)
		require.ErrorIs(t, err, pgx.ErrNoRows)
	}
	// Inside a transaction they end with their statement too, and the
	// transaction goes on (see TestPlannerSettingsEndWithTheirStatementInsideATransaction).
	require.NoError(t, s.WithTx(ctx, func(tx *store.Tx) error {
		_, err := tx.IndexScansOnlyForTest(ctx, settings)
		require.NoError(t, err)
		got, err := tx.SetLocalForTest(ctx, "application_name", "x")
		require.NoError(t, err)
		require.Equal(t, "x", got)
		var later string
		require.NoError(t, tx.ConnForTest(ctx).QueryRow(ctx, settings).Scan(&later))
		require.Equal(t, "on,on,auto", later)
		return nil
	}))
}

// Ending a batch of attempts joins the outcomes to their jobs by hash: as
// a nested loop (PostgreSQL takes the outcomes' arrays for ten rows), each
// outcome was compared with every job of the batch. The plan is read as
// auto_explain reports it, through notices on a connection of the test's.
func TestEndingAttemptsJoinsTheBatchByHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 64, 65536, 0)
	leased := b.leased(t, r, 20)

	var plans []string
	cfg, err := pgx.ParseConfig(b.db.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { plans = append(plans, n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`, `SET auto_explain.log_level = notice`} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	done, err := finish(store.New(conn)).FinishAll(ctx, r, exitedZero(r, leased))
	require.NoError(t, err)
	for _, d := range done {
		require.NoError(t, d.Err)
	}
	var plan string
	for _, p := range plans {
		if strings.Contains(p, "-- name: FinishAttempts") {
			plan = p
		}
	}
	require.NotEmpty(t, plan, "no plan reported for FinishAttempts among %d", len(plans))
	require.Contains(t, plan, "Hash Join")
	require.NotContains(t, plan, "Nested Loop", plan)
}

// A memory claim no runner of the pool enforces is blocked, with the
// reason; once the pool allows unenforced memory, it is queued again.
func TestAnUnenforceableMemoryClaimIsBlocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	b.runner(t, 8, 65536, 0) // does not enforce memory limits
	j := b.submit(t, record.Claim{Cores: 1, MemoryMiB: 1024, WallClockSeconds: 60})
	sweep := func() sweepResult {
		res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
		require.NoError(t, err)
		return res
	}
	require.Equal(t, 1, sweep().Blocked)
	got, err := b.store.Job(ctx, record.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobBlocked, got.State)
	require.Contains(t, got.StateReason, "enforces memory limits")
	_, err = b.db.Exec(ctx, `UPDATE pools SET allow_unenforced_memory = true WHERE id = $1`, b.pool.ID)
	require.NoError(t, err)
	require.Equal(t, 1, sweep().Unblocked)
}

// A blocked check that stops at its batch size says so: the sweeper does
// not move its starting point past jobs it did not read.
func TestABlockedCheckCutShortSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	b.runner(t, 8, 65536, 0)
	for range 2 {
		b.submit(t, record.Claim{Cores: 16, WallClockSeconds: 60}) // fits no runner
	}
	var got []sweepResult
	for range 3 {
		res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24, Batch: 1})
		require.NoError(t, err)
		got = append(got, res)
	}
	require.Equal(t, []sweepResult{{Blocked: 1, BlockedCut: true}, {Blocked: 1, BlockedCut: true}, {}}, got)
}

// Job events are counted once committed: those of a savepoint that rolled
// back are not, and a transaction's count by type reaches the hooks once.
func TestJobEventsAreCountedWhenCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	var mu sync.Mutex
	var calls []string
	counted := map[string]int{}
	b.store.OnJobEvents(func(typ string, n int) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, typ)
		counted[typ] += n
	})
	n := store.NewJob{PoolID: b.pool.ID, Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"}
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		require.Error(t, tx.WithTx(ctx, func(tx *store.Tx) error {
			_, _, err := tx.SubmitJob(ctx, record.AllOrganisations(), n)
			require.NoError(t, err)
			return errors.New("rolled back")
		}))
		for range 2 {
			_, _, err := tx.SubmitJob(ctx, record.AllOrganisations(), n)
			require.NoError(t, err)
		}
		require.Empty(t, counted, "nothing before the commit")
		return nil
	}))
	require.Equal(t, map[string]int{"SUBMITTED": 2}, counted)
	require.Equal(t, []string{"SUBMITTED"}, calls, "one call for the type")
}

// nextMillisecond returns once the clock has passed into the next
// millisecond: what is stamped after it is later than what was stamped
// before, at the millisecond's resolution too.
func nextMillisecond(t *testing.T) {
	t.Helper()
	now := time.Now().UnixMilli()
	testutil.Eventually(t, time.Second, func() bool { return time.Now().UnixMilli() > now }, "the clock moves on")
}
