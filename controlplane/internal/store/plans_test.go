package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// explained is a connection of the test's own on which auto_explain
// reports the plan of every statement as a notice, and the plans it
// reported, by the sqlc name of their statement ("-- name: X").
type explained struct {
	conn  *pgx.Conn
	plans map[string][]string
}

func explainedConn(t *testing.T, b jobsBundle) *explained {
	t.Helper()
	ctx := context.Background()
	e := &explained{plans: map[string][]string{}}
	cfg, err := pgx.ParseConfig(b.db.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if _, rest, ok := strings.Cut(n.Message, "-- name: "); ok {
			name, _, _ := strings.Cut(rest, " ")
			e.plans[name] = append(e.plans[name], n.Message)
		} else {
			e.plans[""] = append(e.plans[""], n.Message)
		}
	}
	e.conn, err = pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { e.conn.Close(context.Background()) })
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`, `SET auto_explain.log_level = notice`} {
		_, err := e.conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	return e
}

// plan is the one plan reported for the statement named name.
func (e *explained) plan(t *testing.T, name string) string {
	t.Helper()
	require.Len(t, e.plans[name], 1, "plans reported for %s", name)
	return e.plans[name][0]
}

// The queue's hot statements are planned for index scans even where the
// statistics make a sequential scan look cheaper: a table of a few rows,
// analyzed, is where the planner prefers one. Each statement is read back
// as PostgreSQL planned it; the plans guarded against are sequential and
// bitmap scans of jobs (which read every row, or mark no dead index entry)
// and, for ending attempts, a nested loop over the batch.
func TestHotStatementsArePlannedForIndexScans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 64, 65536, 0)
	b.leased(t, r, 4) // rows for the statistics: a table of few rows
	_, err := b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	batch := make([]store.NewJob, 8)
	for i := range batch {
		batch[i] = b.newJob(record.Claim{Cores: 1, WallClockSeconds: 60})
	}
	_, _, err = b.store.SubmitJobs(ctx, record.AllOrganisations(), batch)
	require.NoError(t, err)

	e := explainedConn(t, b)
	s := store.New(e.conn)
	leased, err := s.ClaimJobs(ctx, anything(r), 8)
	require.NoError(t, err)
	require.Len(t, leased, 8)
	reports := make([]store.LeaseReport, len(leased))
	for i, l := range leased {
		reports[i] = store.LeaseReport{LeaseID: l.ID, Attempt: l.Attempt, Phase: "RUNNING"}
	}
	held, err := s.ExtendLeases(ctx, r, 60, reports)
	require.NoError(t, err)
	require.Len(t, held, 8)
	done, err := finish(s).FinishAll(ctx, r, exitedZero(r, leased))
	require.NoError(t, err)
	for _, d := range done {
		require.NoError(t, d.Err)
	}

	for _, name := range []string{"ClaimJobs", "ExtendLeases", "ReadJobs", "FinishAttempts"} {
		plan := e.plan(t, name)
		for _, guarded := range []string{"Seq Scan on jobs", "Bitmap Heap Scan on jobs"} {
			require.Falsef(t, strings.Contains(plan, guarded), "%s planned with a %s:\n%s", name, guarded, plan)
		}
	}
	finish := e.plan(t, "FinishAttempts")
	require.Truef(t, strings.Contains(finish, "Hash Join"), "FinishAttempts planned without a hash join:\n%s", finish)
	require.Falsef(t, strings.Contains(finish, "Nested Loop"), "FinishAttempts planned with a nested loop:\n%s", finish)
}

// A statement that follows a hot one in the same transaction is planned on
// its own terms: the hot statement's settings end with it, and the values
// in force before it (a caller's own, here) are back.
func TestPlannerSettingsEndWithTheirStatementInsideATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 64, 65536, 0)
	b.leased(t, r, 4)
	_, err := b.db.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	e := explainedConn(t, b)
	s := store.New(e.conn)
	const settings = `SELECT current_setting('enable_seqscan') || ',' || current_setting('enable_bitmapscan') || ','
		|| current_setting('plan_cache_mode') || ',' || current_setting('enable_nestloop')`
	require.NoError(t, s.WithTx(ctx, func(tx *store.Tx) error {
		_, err := tx.SetLocalForTest(ctx, "plan_cache_mode", "force_custom_plan")
		require.NoError(t, err)
		got, err := tx.IndexScansOnlyForTest(ctx, settings)
		require.NoError(t, err)
		require.Equal(t, "off,off,force_generic_plan,on", got, "the settings in force for the statement")

		_, err = tx.ClaimJobs(ctx, anything(r), 1)
		require.NoError(t, err)
		var after string
		require.NoError(t, tx.ConnForTest(ctx).QueryRow(ctx, settings).Scan(&after))
		require.Equal(t, "on,on,force_custom_plan,on", after, "the settings outlived their statement")
		// And the planner is free again: this table of few rows is read
		// whole, as it should be.
		var n int
		require.NoError(t, tx.ConnForTest(ctx).QueryRow(ctx, `SELECT count(*) FROM jobs WHERE pool_id = $1 AND image <> ''`, b.pool.ID).Scan(&n))
		return nil
	}))
	var free string
	for _, p := range e.plans[""] {
		if strings.Contains(p, "image <> ''") {
			free = p
		}
	}
	require.Contains(t, free, "Seq Scan on jobs", "the statement after a hot one was planned with its settings:\n%s", free)
}
