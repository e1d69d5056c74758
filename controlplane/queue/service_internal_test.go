package queue

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/record"
)

// The names leases carry are read once and kept for namesTTL: a rename
// shows once they are older. An id that names nothing has no name.
func TestLeaseNamesAreKeptAWhile(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	ctx := context.Background()
	n := newNames(d.st)
	nobody := uuid.New()
	want := map[uuid.UUID]string{d.pool.ID: d.pool.Name, d.org.ID: d.org.Name}
	require.Equal(t, want, n.of(ctx, []uuid.UUID{d.pool.ID, nobody}, []uuid.UUID{d.org.ID, d.org.ID}))

	_, err := d.db.Exec(ctx, `UPDATE pools SET name = name || '-renamed' WHERE id = $1`, d.pool.ID)
	require.NoError(t, err)
	require.Equal(t, want, n.of(ctx, []uuid.UUID{d.pool.ID}, []uuid.UUID{d.org.ID}), "kept")
	n.mu.Lock()
	n.seen[d.pool.ID] = named{name: n.seen[d.pool.ID].name, at: time.Now().Add(-namesTTL)}
	n.mu.Unlock()
	require.Equal(t, map[uuid.UUID]string{d.pool.ID: d.pool.Name + "-renamed"}, n.of(ctx, []uuid.UUID{d.pool.ID}, nil), "read again")
	require.Equal(t, map[uuid.UUID]string{d.org.ID: d.org.Name}, newNames(d.st).of(ctx, nil, []uuid.UUID{d.org.ID}), "an organisation alone")
}

// A job's watch wakes for its own changes (an event, output) and for a
// listener that reconnected, not for another job's.
func TestAJobsWatchWakesForItsOwnChanges(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	mine := d.submit(t, record.AllOrganisations(), nil)
	other := d.submit(t, record.AllOrganisations(), nil)
	w := d.q.WatchJob(mine.ID)
	defer w.Close()
	ctx := context.Background()
	_, err := d.q.Cancel(ctx, record.AllOrganisations(), other.ID)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Wait(short), context.DeadlineExceeded, "another job's change")

	_, err = d.q.Cancel(ctx, record.AllOrganisations(), mine.ID)
	require.NoError(t, err)
	within, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, w.Wait(within))
}

// A hold's bounds, on both sides: 1 to 64 GPUs, a minute to 90 days, and
// a reason.
func TestAHoldsBounds(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		gpus   int
		d      time.Duration
		reason string
		want   string // "" when held
	}{
		{"one GPU for a minute", 1, time.Minute, "maintenance", ""},
		{"no GPU", 0, time.Minute, "maintenance", "gpus: 1 to 64"},
		{"64 GPUs", 64, time.Hour, "maintenance", ""},
		{"65 GPUs", 65, time.Hour, "maintenance", "gpus: 1 to 64"},
		{"under a minute", 1, time.Minute - time.Second, "maintenance", "durationSeconds: between 60 and 7776000"},
		{"90 days", 1, 90 * 24 * time.Hour, "maintenance", ""},
		{"past 90 days", 1, 90*24*time.Hour + time.Second, "maintenance", "durationSeconds: between 60 and 7776000"},
		{"no reason", 1, time.Hour, "", "reason: 1 to 500 characters"},
	} {
		start := time.Now()
		h, err := d.q.Hold(ctx, record.AllOrganisations(), d.runner.ID, c.gpus, c.reason, c.d, nil)
		if c.want != "" {
			var ie *record.InputError
			require.ErrorAs(t, err, &ie, c.name)
			require.Equal(t, c.want, ie.Msg, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.gpus, h.GPUs, c.name)
		require.WithinRange(t, h.Until, start.Add(c.d).Add(-time.Second), time.Now().Add(c.d).Add(time.Second), c.name)
		released, err := d.q.Release(ctx, record.AllOrganisations(), h.ID)
		require.NoError(t, err)
		require.NotNil(t, released.ReleasedAt, c.name)
	}
}

// A job submitted again under its idempotency key in the same pool is the
// one submitted before, not created again; the key for another spec is a
// conflict, and the batch it came in is refused whole.
func TestAnIdempotencyKeyNamesOneJob(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	ctx := context.Background()
	key := "nightly-" + uuid.NewString()
	sub := submission(func(s *Submission) { s.PoolID, s.IdempotencyKey = d.pool.ID, &key })
	first, created, err := d.q.Submit(ctx, record.AllOrganisations(), sub)
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := d.q.Submit(ctx, record.AllOrganisations(), sub)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)

	other := sub
	other.Image = "alpine"
	fresh := submission(func(s *Submission) { s.PoolID = d.pool.ID })
	_, _, err = d.q.SubmitAll(ctx, record.AllOrganisations(), []Submission{fresh, other})
	require.ErrorIs(t, err, record.ErrConflict)
	jobs, err := d.q.Jobs(ctx, record.AllOrganisations(), record.JobFilter{PoolID: &d.pool.ID}, record.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "nothing of the refused batch")
}

// A job may ask for a network only in a pool that allows one; the pool is
// read, inside the caller's scope, only when a job asks.
func TestANetworkOnlyWhereThePoolAllowsIt(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	ctx := context.Background()
	closed, err := d.st.CreatePool(ctx, record.NewPool{OrganisationID: &d.org.ID, Name: "closed-" + uuid.NewString()[:8]})
	require.NoError(t, err)
	in := func(pool uuid.UUID, network bool) Submission {
		return submission(func(s *Submission) { s.PoolID, s.Options.Network = pool, network })
	}
	_, _, err = d.q.SubmitAll(ctx, record.AllOrganisations(), []Submission{in(closed.ID, false), in(closed.ID, true)})
	var ie *record.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, 1, *ie.Item)
	require.Equal(t, "network: pool "+closed.Name+" does not allow its jobs a network (Pool.allowNetwork)", ie.Msg)

	_, _, err = d.q.SubmitAll(ctx, record.AllOrganisations(), []Submission{in(closed.ID, true), in(closed.ID, false)})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, 0, *ie.Item, "the first job")

	jobs, created, err := d.q.SubmitAll(ctx, record.AllOrganisations(), []Submission{in(closed.ID, false)})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, created)
	require.False(t, jobs[0].Options.Network)
	jobs, _, err = d.q.SubmitAll(ctx, record.AllOrganisations(), []Submission{in(d.pool.ID, false), in(d.pool.ID, true)})
	require.NoError(t, err)
	require.True(t, jobs[1].Options.Network)

	elsewhere := record.OneOrganisation(uuid.New())
	_, _, err = d.q.SubmitAll(ctx, elsewhere, []Submission{in(d.pool.ID, true)})
	require.ErrorIs(t, err, record.ErrNotFound)
}

// A batch holds up to MaxBatch jobs: one that size is checked job by job.
func TestABatchOfTheMostJobs(t *testing.T) {
	t.Parallel()
	q := NewService(nil, nil)
	pool := uuid.New()
	batch := make([]Submission, MaxBatch)
	for i := range batch {
		batch[i] = submission(func(s *Submission) { s.PoolID = pool })
	}
	batch[MaxBatch-1].MaxAttempts = 0
	_, _, err := q.SubmitAll(context.Background(), record.AllOrganisations(), batch)
	var ie *record.InputError
	require.ErrorAs(t, err, &ie)
	require.NotNil(t, ie.Item)
	require.Equal(t, MaxBatch-1, *ie.Item)
	_, _, err = q.Submit(context.Background(), record.AllOrganisations(), batch[MaxBatch-1])
	require.ErrorAs(t, err, &ie)
}
