package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc"
)

// indexScansOnlySQL turns sequential and bitmap scans off for the rest of
// the transaction it runs in, and has each prepared statement keep the one
// plan it makes (a generic plan). With only index scans to choose from, a
// plan made once is as good as one made per call, and planning per call
// weighed on small requests: every batch of results planned its ReadJobs
// again, since a custom plan for a few ids always looked cheaper than the
// generic one. Runners asking for 4 leases at a time (bench-lease
// -lease-max 4): 3,460 jobs/s with this, 3,210 without.
const indexScansOnlySQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`

// indexScansOnly runs each statement of the queue's hot path (claims,
// results, heartbeats) planned for index scans only, whatever the
// statistics say and whatever the table looked like when the connection
// first planned it (see ClaimJobs for what happened otherwise). It sends
// the planner settings and the statement together, one round trip: as a
// pipeline of two statements with one Sync they run in one transaction,
// the caller's or an implicit one that ends with them, so the settings
// reach no other statement outside a transaction. A request for work, or
// its results, costs no round trip more for it (a transaction around each
// claim cost agents that ask for 4 leases a sixth of their throughput).
//
// Inside a transaction the settings last to its end, as SET LOCAL does:
// the statements that follow in it are planned with them too (and, after
// hashJoins, with nested loops off). Those of FinishAttempts find their
// rows by key, as these must.
func (s *Store) indexScansOnly(ctx context.Context) dbsqlc.DBTX {
	return indexScansOnly{s.conn(ctx), indexScansOnlySQL}
}

// hashJoinsSQL is indexScansOnlySQL with nested loops off as well.
const hashJoinsSQL = indexScansOnlySQL + `, set_config('enable_nestloop', 'off', true)`

// hashJoins is indexScansOnly for a statement that joins a batch given as
// arrays to the rows it names (FinishAttempts): PostgreSQL takes an unnest
// of a parameter for ten rows, and would rather compare each element with
// every row than hash either side. With the batch's 125 results, ending
// them took 51 to 55 µs a job instead of 29 (bench-lease -isolated).
func (s *Store) hashJoins(ctx context.Context) dbsqlc.DBTX {
	return indexScansOnly{s.conn(ctx), hashJoinsSQL}
}

type indexScansOnly struct {
	db interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	}
	settings string // the planner settings sent before the statement
}

func (d indexScansOnly) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(d.settings)
	b.Queue(sql, args...)
	br := d.db.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	return br, nil
}

func (d indexScansOnly) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := d.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (d indexScansOnly) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := d.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (d indexScansOnly) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := d.Query(ctx, sql, args...)
	return batchRow{rows, err}
}

// batchRows are a pipeline's last rows. Once they are read, Err ends the
// pipeline and reports how it ended: outside a transaction the pipeline's
// end is the commit, so rows read are not yet rows committed (a plain
// query's rows report their commit the same way). Close ends it too, and
// gives a pooled connection back.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	read   bool // Next has said there are no more
	ended  bool
	endErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.read = true
	return false
}

func (r *batchRows) end() error {
	if !r.ended {
		r.ended = true
		r.Rows.Close()
		r.endErr = r.br.Close()
	}
	return r.endErr
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	if r.read || r.ended {
		return r.end()
	}
	return nil
}

func (r *batchRows) Close() { r.end() }

// batchRow is QueryRow's answer over batchRows.
type batchRow struct {
	rows pgx.Rows
	err  error
}

func (r batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
