package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

func TestMigrateFromEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewEmptyPool(t)

	v, err := store.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 0, v)
	require.ErrorIs(t, store.CheckSchema(ctx, pool), store.ErrSchemaOlder)

	applied, err := store.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Len(t, applied, store.LatestVersion())
	require.NoError(t, store.CheckSchema(ctx, pool))

	// A second run is a no-op.
	applied, err = store.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, applied)
}

func TestNewerSchemaIsRefusedAndLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	future := store.LatestVersion() + 1
	_, err := pool.Exec(ctx, "INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, 'from_the_future')", future)
	require.NoError(t, err)

	require.ErrorIs(t, store.CheckSchema(ctx, pool), store.ErrSchemaNewer)
	_, err = store.Migrate(ctx, pool)
	require.ErrorIs(t, err, store.ErrSchemaNewer)

	v, err := store.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, future, v)
}

func TestConcurrentMigrationsApplyEachVersionOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewEmptyPool(t)

	const n = 4
	total := make(chan int, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			applied, err := store.Migrate(ctx, pool)
			total <- len(applied)
			errs <- err
		}()
	}
	sum := 0
	for range n {
		sum += <-total
		require.NoError(t, <-errs)
	}
	require.Equal(t, store.LatestVersion(), sum)
}

// Migration 10 on a database with data: a run left open by an expired
// lease ends when its expiry was recorded, a running attempt's run stays
// open, and a finished job can no longer keep a runner.
func TestHeldMeansARunnerMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewEmptyPool(t)
	migrateThrough(t, pool, 9)
	poolID, runner := uuid.New(), uuid.New()
	expired, held := uuid.New(), uuid.New()
	expiredAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// One statement (parameters allow no more); nothing checks a key here.
	_, err := pool.Exec(ctx, `
		WITH a AS (
			INSERT INTO jobs (id, pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, attempt)
			VALUES ($1, $3, 'x', 1, 0, 0, 60, 1)
		), b AS (
			INSERT INTO jobs (id, pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, attempt, state, runner_id, lease_expires_at)
			VALUES ($2, $3, 'x', 1, 0, 0, 60, 1, 'RUNNING', $4, now() + interval '1 minute')
		), c AS (
			INSERT INTO job_runs (job_id, attempt, runner_id, runner_name) VALUES ($1, 1, $4, 'r'), ($2, 1, $4, 'r')
		)
		INSERT INTO job_events (job_id, type, attempt, at) VALUES ($1, 'LEASE_EXPIRED', 1, $5)`,
		expired, held, poolID, runner, expiredAt)
	require.NoError(t, err)

	migrateThrough(t, pool, 10)

	var finished *time.Time
	var reason *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT finished_at, return_reason FROM job_runs WHERE job_id = $1`, expired).Scan(&finished, &reason))
	require.NotNil(t, finished)
	require.True(t, expiredAt.Equal(*finished), "ended at %v", finished)
	require.Equal(t, "lease expired", *reason)
	require.NoError(t, pool.QueryRow(ctx, `SELECT finished_at, return_reason FROM job_runs WHERE job_id = $1`, held).Scan(&finished, &reason))
	require.Nil(t, finished, "the attempt still running keeps its run open")
	require.Nil(t, reason)

	_, err = pool.Exec(ctx, `UPDATE jobs SET runner_id = $2 WHERE id = $1`, expired, runner)
	require.ErrorContains(t, err, "jobs_held_check", "a job that is not held has no runner")
	_, err = pool.Exec(ctx, `UPDATE jobs SET lease_expires_at = NULL WHERE id = $1`, held)
	require.ErrorContains(t, err, "jobs_held_check", "a held job has a lease expiry")
}

// migrateThrough applies the migrations up to version n, as Migrate would
// have when n was the latest.
func migrateThrough(t *testing.T, pool store.DB, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS runmesh_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	from, err := store.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	for _, m := range store.Migrations()[from:n] {
		_, err := pool.Exec(ctx, m.SQL)
		require.NoError(t, err, m.Name)
		_, err = pool.Exec(ctx, `INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		require.NoError(t, err)
	}
}

// Migration 16 on a database with data: a held attempt's open run moves
// into its job row (leased_at) and is written again when the attempt
// ends; ended runs stay; a held job that had no run gets a lease time.
func TestRunsWrittenWhenTheyEndMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewEmptyPool(t)
	migrateThrough(t, pool, 15)
	s := store.New(pool)
	org, err := s.CreateOrganisation(ctx, "o")
	require.NoError(t, err)
	// The pool and the runner by hand: the store's statements are the
	// newest schema's.
	var p struct{ ID uuid.UUID }
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO pools (organisation_id, name) VALUES ($1, 'p') RETURNING id`, org.ID).Scan(&p.ID))
	var runner uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `
		WITH t AS (INSERT INTO enrolment_tokens (pool_id, token_hash, expires_at)
		           VALUES ($1, sha256('m16'::bytea), now() + interval '1 hour') RETURNING id)
		INSERT INTO runners (pool_id, name, status, public_key, fingerprint, csr, enrolment_token_id, cores)
		SELECT $1, 'r-m16', 'APPROVED', sha256('key'::bytea), 'SHA256:x', '\x00', t.id, 4 FROM t RETURNING id`, p.ID).Scan(&runner))
	var name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT name FROM runners WHERE id = $1`, runner).Scan(&name))
	held, bare := uuid.New(), uuid.New()
	leasedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err = pool.Exec(ctx, `
		WITH a AS (
			INSERT INTO jobs (id, pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, attempt, state, runner_id, lease_expires_at)
			VALUES ($1, $3, 'x', 1, 0, 0, 60, 2, 'RUNNING', $4, now() + interval '1 minute'),
			       ($2, $3, 'x', 1, 0, 0, 60, 1, 'LEASED', $4, now() + interval '1 minute')
		)
		INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, leased_at, finished_at, return_reason)
		VALUES ($1, 1, $4, $6, $5::timestamptz - interval '1 hour', $5, 'lease expired'), ($1, 2, $4, $6, $5, NULL, NULL)`,
		held, bare, p.ID, runner, leasedAt, name)
	require.NoError(t, err)

	migrateThrough(t, pool, 16)

	var got *time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT leased_at FROM jobs WHERE id = $1`, held).Scan(&got))
	require.NotNil(t, got)
	require.True(t, leasedAt.Equal(*got), "leased at %v", got)
	require.NoError(t, pool.QueryRow(ctx, `SELECT leased_at FROM jobs WHERE id = $1`, bare).Scan(&got))
	require.NotNil(t, got, "a held job without a run gets a lease time")
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_runs WHERE job_id = $1`, held).Scan(&rows))
	require.Equal(t, 1, rows, "the ended run stays, the open one is gone")

	// Read as before, by this version's statements (the newest schema's):
	// the ended attempt, then the held one, open.
	migrateThrough(t, pool, len(store.Migrations()))
	runs, err := s.JobRunsForJobs(ctx, []uuid.UUID{held})
	require.NoError(t, err)
	require.Len(t, runs[held], 2)
	require.Equal(t, "lease expired", *runs[held][0].ReturnReason)
	require.Equal(t, 2, runs[held][1].Attempt)
	require.Nil(t, runs[held][1].FinishedAt)
	require.Equal(t, name, runs[held][1].RunnerName)
	require.True(t, leasedAt.Equal(runs[held][1].LeasedAt))

	// Its end writes its run once.
	zero := 0
	_, err = finish(s).Finish(ctx, record.Outcome{JobID: held, Attempt: 2, RunnerID: runner, ExitCode: &zero})
	require.NoError(t, err)
	runs, err = s.JobRunsForJobs(ctx, []uuid.UUID{held})
	require.NoError(t, err)
	require.Len(t, runs[held], 2)
	require.NotNil(t, runs[held][1].FinishedAt)
	require.Equal(t, 0, *runs[held][1].ExitCode)
	require.True(t, leasedAt.Equal(runs[held][1].LeasedAt))
}

// A run an older version wrote at its claim (open, and no leased_at on the
// job), as while replicas of both versions share the database, is shown
// once while the attempt is held, and completed where it ends: a result,
// an expired lease.
func TestARunWrittenAtTheClaimIsCompleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	runner := b.runner(t, 4, 0, 0)
	var name string
	require.NoError(t, b.db.QueryRow(ctx, `SELECT name FROM runners WHERE id = $1`, runner).Scan(&name))
	reported, expired := uuid.New(), uuid.New()
	_, err := b.db.Exec(ctx, `
		WITH a AS (
			INSERT INTO jobs (id, pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, attempt, state, runner_id, lease_expires_at)
			VALUES ($1, $3, 'x', 1, 0, 0, 60, 1, 'RUNNING', $4, now() + interval '1 minute'),
			       ($2, $3, 'x', 1, 0, 0, 60, 1, 'RUNNING', $4, now() - interval '1 minute')
		)
		INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, leased_at)
		VALUES ($1, 1, $4, $5, now() - interval '2 minutes'), ($2, 1, $4, $5, now() - interval '2 minutes')`,
		reported, expired, b.pool.ID, runner, name)
	require.NoError(t, err)

	// While they are held, each shows its open run once.
	runs, err := b.store.JobRunsForJobs(ctx, []uuid.UUID{reported, expired})
	require.NoError(t, err)
	for _, id := range []uuid.UUID{reported, expired} {
		require.Len(t, runs[id], 1)
		require.Nil(t, runs[id][0].FinishedAt)
	}

	zero := 0
	_, err = finish(b.store).Finish(ctx, record.Outcome{JobID: reported, Attempt: 1, RunnerID: runner, ExitCode: &zero})
	require.NoError(t, err)
	res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24, LeasesOnly: true})
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)

	runs, err = b.store.JobRunsForJobs(ctx, []uuid.UUID{reported, expired})
	require.NoError(t, err)
	require.Len(t, runs[reported], 1)
	require.NotNil(t, runs[reported][0].FinishedAt)
	require.Equal(t, 0, *runs[reported][0].ExitCode)
	require.Len(t, runs[expired], 1)
	require.NotNil(t, runs[expired][0].FinishedAt)
	require.Equal(t, "lease expired", *runs[expired][0].ReturnReason)
}
