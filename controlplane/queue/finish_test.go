package queue

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

// A result is decided on the job as read without locks; a cancel that
// lands between that read and the update is not lost: the update is
// guarded by what the decision rested on, and the job is decided again
// under a row lock.
func TestACancelDuringAResultIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := leased(t)
	reads := 0
	f := &Finisher{Store: x.store, afterRead: func(context.Context) {
		reads++
		// Another replica's transaction: not the one the result runs in.
		_, err := x.store.CancelJob(context.Background(), record.AllOrganisations(), x.job.ID)
		require.NoError(t, err)
	}}
	zero := 0
	done, err := f.Finish(ctx, record.Outcome{JobID: x.job.ID, Attempt: x.job.Attempt, RunnerID: x.runner, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, 1, reads)
	require.Equal(t, record.JobCancelled, done.State, "the cancel that came between the read and the update")
	got, err := x.store.Job(ctx, record.AllOrganisations(), x.job.ID)
	require.NoError(t, err)
	require.Equal(t, record.JobCancelled, got.State)
}

// Failures in a row follow the applied outcomes in order: a counted host
// fault each, one reset for each run of other outcomes; outcomes not
// applied (stale) count for nothing.
func TestFailuresFollowTheOutcomesInOrder(t *testing.T) {
	t.Parallel()
	fault, other := &store.Transition{CountsAsHostFault: true}, &store.Transition{}
	for _, c := range []struct {
		name string
		ts   []*store.Transition
		want []bool
	}{
		{"none", nil, nil},
		{"one success resets", []*store.Transition{other}, []bool{false}},
		{"a run of successes is one reset", []*store.Transition{other, other, other}, []bool{false}},
		{"faults count each", []*store.Transition{fault, fault}, []bool{true, true}},
		{"a reset between faults", []*store.Transition{fault, other, other, fault}, []bool{true, false, true}},
		{"stale outcomes count for nothing", []*store.Transition{nil, fault, nil, other}, []bool{true, false}},
	} {
		b := &batch{transitions: c.ts}
		require.Equal(t, c.want, b.failures(), c.name)
	}
}

// fixture is a pool with one approved runner, and a job leased to it, in
// an organisation of its own on the shared database.
type fixture struct {
	pool   *pgxpool.Pool
	store  *store.Store
	runner uuid.UUID
	job    record.Job
}

func leased(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	db := storetest.SharedPool(t)
	s := store.New(db)
	org, err := s.CreateOrganisation(ctx, "org-"+uuid.NewString()[:8])
	require.NoError(t, err)
	pool, err := s.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "p"})
	require.NoError(t, err)
	r := storetest.ApprovedRunner(t, s, pool.ID, 8, 65536, 0)
	_, _, err = s.SubmitJob(ctx, record.AllOrganisations(), store.NewJob{PoolID: pool.ID, Image: "busybox",
		Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"})
	require.NoError(t, err)
	big := record.Claim{Cores: 8, MemoryMiB: 65536}
	held, ok, err := s.ClaimJob(ctx, record.ClaimRequest{RunnerID: r, Kinds: []string{"default"}, Free: big, Largest: big, DefaultLeaseSeconds: 30})
	require.NoError(t, err)
	require.True(t, ok)
	return fixture{pool: db, store: s, runner: r, job: held}
}

func (x fixture) failuresInARow(t *testing.T) (n int, quarantined bool) {
	t.Helper()
	require.NoError(t, x.pool.QueryRow(context.Background(), `SELECT failures_in_a_row, quarantined_at IS NOT NULL FROM runners WHERE id = $1`, x.runner).Scan(&n, &quarantined))
	return n, quarantined
}

// The runner's failures in a row follow a result decided again under its
// lock (the cancel race) as they follow any other.
func TestFailuresFollowAResultDecidedAgain(t *testing.T) {
	t.Parallel()
	x := leased(t)
	_, err := x.pool.Exec(context.Background(), `UPDATE runners SET failures_in_a_row = 1 WHERE id = $1`, x.runner)
	require.NoError(t, err)
	f := &Finisher{Store: x.store, afterRead: func(context.Context) {
		_, err := x.store.CancelJob(context.Background(), record.AllOrganisations(), x.job.ID)
		require.NoError(t, err)
	}}
	zero := 0
	_, err = f.Finish(context.Background(), record.Outcome{JobID: x.job.ID, Attempt: x.job.Attempt, RunnerID: x.runner, ExitCode: &zero})
	require.NoError(t, err)
	n, _ := x.failuresInARow(t)
	require.Zero(t, n, "an exit code resets the count")
}

// QuarantineAfter host faults in a row quarantine the runner; left zero,
// DefaultQuarantineAfter do.
func TestQuarantineAfter(t *testing.T) {
	t.Parallel()
	fault := func(f *Finisher, x fixture) {
		reason := "the image could not be pulled"
		_, err := f.Finish(context.Background(), record.Outcome{JobID: x.job.ID, Attempt: x.job.Attempt, RunnerID: x.runner, ReturnReason: &reason, HostFault: true})
		require.NoError(t, err)
	}
	x := leased(t)
	fault(&Finisher{Store: x.store}, x)
	n, quarantined := x.failuresInARow(t)
	require.Equal(t, 1, n)
	require.False(t, quarantined, "one of the default three")

	x = leased(t)
	fault(&Finisher{Store: x.store, QuarantineAfter: 1}, x)
	_, quarantined = x.failuresInARow(t)
	require.True(t, quarantined)
}

// A result sent again after it was recorded is answered as recorded; the
// same result claimed for another runner, or a different one, is stale.
func TestAResultSentAgainIsRecognised(t *testing.T) {
	t.Parallel()
	x := leased(t)
	f := &Finisher{Store: x.store}
	zero, one := 0, 1
	o := record.Outcome{JobID: x.job.ID, Attempt: x.job.Attempt, RunnerID: x.runner, ExitCode: &zero}
	ctx := context.Background()
	_, err := f.Finish(ctx, o)
	require.NoError(t, err)
	done, err := f.FinishAll(ctx, x.runner, []record.Outcome{o})
	require.NoError(t, err)
	require.Equal(t, Finished{State: record.JobSucceeded, AlreadyRecorded: true}, done[0])

	other := o
	other.RunnerID = uuid.New()
	different := o
	different.ExitCode = &one
	done, err = f.FinishAll(ctx, x.runner, []record.Outcome{other, different})
	require.NoError(t, err)
	require.ErrorIs(t, done[0].Err, store.ErrStaleAttempt)
	require.ErrorIs(t, done[1].Err, store.ErrStaleAttempt)
}

// decide fences each outcome and decides it on its job as read: one for a
// job the runner does not hold, or the same attempt a second time, is
// stale; each decided outcome's transition is its own, in the batch's
// order, however many share the batch.
func TestDecideFencesAndDecidesEachOutcome(t *testing.T) {
	t.Parallel()
	runner := uuid.New()
	zero, one, reason := 0, 1, "disk gone"
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	held := func(id uuid.UUID) store.HeldJob {
		return store.HeldJob{ID: id, State: record.JobRunning, Attempt: 1, MaxAttempts: 3, RunnerID: &runner}
	}
	outcomes := []record.Outcome{
		{JobID: a, Attempt: 1, RunnerID: runner, ReturnReason: &reason, HostFault: true},
		{JobID: c, Attempt: 1, RunnerID: runner, ExitCode: &zero}, // not held: not read
		{JobID: a, Attempt: 1, RunnerID: runner, ExitCode: &zero}, // the same attempt again
		{JobID: b, Attempt: 1, RunnerID: runner, ExitCode: &one},
	}
	bt := &batch{runnerID: runner, outcomes: outcomes, out: make([]Finished, len(outcomes)), transitions: make([]*store.Transition, len(outcomes))}
	endings, decided := bt.decide([]int{0, 1, 2, 3}, []store.HeldJob{held(a), held(b)})

	require.Len(t, endings, 2)
	require.Equal(t, map[uuid.UUID]int{a: 0, b: 3}, decided)
	require.Equal(t, []error{nil, store.ErrStaleAttempt, store.ErrStaleAttempt, nil},
		[]error{bt.out[0].Err, bt.out[1].Err, bt.out[2].Err, bt.out[3].Err})
	require.Nil(t, bt.transitions[1])
	require.Nil(t, bt.transitions[2])
	require.Equal(t, endings[0].Transition, *bt.transitions[0])
	require.Equal(t, endings[1].Transition, *bt.transitions[3])
	require.True(t, bt.transitions[0].CountsAsHostFault)
	require.Equal(t, record.JobQueued, bt.transitions[0].State)
	require.Equal(t, record.JobFailed, bt.transitions[3].State)
	require.Equal(t, []bool{true, false}, bt.failures())
}

// Deciding a batch of hundreds of outcomes takes a handful of allocations
// (its maps' and slices' own), not some for each outcome.
func TestDecideAllocatesPerBatch(t *testing.T) {
	runner := uuid.New()
	zero := 0
	allocs := func(n int) float64 {
		outcomes := make([]record.Outcome, n)
		read := make([]store.HeldJob, n)
		idx := make([]int, n)
		for i := range n {
			id := uuid.New()
			outcomes[i] = record.Outcome{JobID: id, Attempt: 1, RunnerID: runner, ExitCode: &zero}
			read[i] = store.HeldJob{ID: id, State: record.JobRunning, Attempt: 1, MaxAttempts: 3, RunnerID: &runner}
			idx[i] = i
		}
		bt := &batch{runnerID: runner, outcomes: outcomes, out: make([]Finished, n), transitions: make([]*store.Transition, n)}
		return testing.AllocsPerRun(10, func() { bt.decide(idx, read) })
	}
	require.Less(t, allocs(512), 32.0)
}
