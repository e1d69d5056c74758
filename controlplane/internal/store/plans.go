package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
)

// planSettings are planner settings that one statement is sent with.
// Each is set for that statement alone: outside a transaction the
// statement and its settings run in one implicit transaction, which ends
// them; inside one, the settings in force before are put back right after
// the statement, in the same round trip, so a statement that follows in the
// caller's transaction is planned as it would be on its own.
type planSettings struct {
	set     string // sets them (set_config(..., true): to the end of the transaction at most)
	save    string // keeps the values in force, for restore
	restore string // puts back what save kept
}

// newPlanSettings builds the statements for settings, given as name and
// value pairs.
func newPlanSettings(pairs ...string) planSettings {
	var set, saved, restore []string
	for i := 0; i < len(pairs); i += 2 {
		name, value := pairs[i], pairs[i+1]
		set = append(set, fmt.Sprintf("set_config('%s', '%s', true)", name, value))
		saved = append(saved, fmt.Sprintf("current_setting('%s')", name))
		restore = append(restore, fmt.Sprintf("set_config('%s', split_part(current_setting('%s'), ',', %d), true)", name, savedSettings, i/2+1))
	}
	return planSettings{
		set:     "SELECT " + strings.Join(set, ", "),
		save:    fmt.Sprintf("SELECT set_config('%s', concat_ws(',', %s), true)", savedSettings, strings.Join(saved, ", ")),
		restore: "SELECT " + strings.Join(restore, ", "),
	}
}

// savedSettings is the placeholder setting that holds, inside a
// transaction, the values a statement's settings replace.
const savedSettings = "runmesh.saved_plan_settings"

// indexScans turns sequential and bitmap scans off and has each prepared
// statement keep the one plan it makes (a generic plan). With only index
// scans to choose from, a plan made once is as good as one made per call,
// and planning per call weighs on small requests: a custom plan for a few
// ids always looks cheaper than the generic one, so every batch of results
// would plan its read again.
var indexScans = newPlanSettings("enable_seqscan", "off", "enable_bitmapscan", "off", "plan_cache_mode", "force_generic_plan")

// indexScansHashJoins is indexScans with nested loops off as well, for a
// statement that joins a batch given as arrays to the rows it names
// (FinishAttempts): PostgreSQL estimates an unnest of a parameter at ten
// rows, and would rather compare each element with every row than hash
// either side.
var indexScansHashJoins = newPlanSettings("enable_seqscan", "off", "enable_bitmapscan", "off", "plan_cache_mode", "force_generic_plan",
	"enable_nestloop", "off")

// indexScansOnly runs a statement of the queue's hot path (claims,
// results, heartbeats) planned for index scans only, whatever the
// statistics say and whatever the table looked like when the connection
// first planned it (see ClaimJobs for what happens otherwise). It sends the
// settings and the statement together, one round trip, as a pipeline with
// one Sync. A request for work, or its results, costs no round trip more.
func (s *Querier) indexScansOnly(ctx context.Context) dbsqlc.DBTX {
	return s.planned(ctx, indexScans)
}

// hashJoins is indexScansOnly with nested loops off (indexScansHashJoins).
func (s *Querier) hashJoins(ctx context.Context) dbsqlc.DBTX {
	return s.planned(ctx, indexScansHashJoins)
}

func (s *Querier) planned(ctx context.Context, settings planSettings) dbsqlc.DBTX {
	return plannedDB{db: s.db, settings: settings, inTx: s.tx != nil}
}

type plannedDB struct {
	db interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	}
	settings planSettings
	inTx     bool // the settings must be put back after the statement
}

func (d plannedDB) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if d.inTx {
		b.Queue(d.settings.save)
	}
	b.Queue(d.settings.set)
	b.Queue(sql, args...)
	if d.inTx {
		b.Queue(d.settings.restore)
	}
	before := 1 // the statements queued before sql
	if d.inTx {
		before = 2
	}
	br := d.db.SendBatch(ctx, b)
	for range before {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (d plannedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
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

func (d plannedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
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

func (d plannedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
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
