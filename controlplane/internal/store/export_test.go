package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// JobsRead is how many times the transaction has read the jobs table
// in full, and how many of its rows it has read in all: by those reads, and
// fetched through any of its indexes (counted under each index).
func (s *Querier) JobsRead(ctx context.Context) (fullScans, rows int64, err error) {
	err = s.db.QueryRow(ctx, `
		SELECT pg_stat_get_xact_numscans('jobs'::regclass),
		       pg_stat_get_xact_tuples_returned('jobs'::regclass)
		       + (SELECT sum(pg_stat_get_xact_tuples_fetched(r)) FROM unnest(
		            array_append((SELECT array_agg(indexrelid) FROM pg_index WHERE indrelid = 'jobs'::regclass), 'jobs'::regclass::oid)) AS r)`).
		Scan(&fullScans, &rows)
	return fullScans, rows, err
}

// JobIndexReads is, for one index of the jobs table, how many of its
// entries the transaction has read (a bitmap scan returns every
// entry it meets; an index scan skips those already marked dead), and how
// many live rows it has fetched through it by index scans (bitmap scans
// fetch none through the index).
func (s *Querier) JobIndexReads(ctx context.Context, index string) (entries, fetched int64, err error) {
	err = s.db.QueryRow(ctx, `
		SELECT pg_stat_get_xact_tuples_returned(i), pg_stat_get_xact_tuples_fetched(i)
		FROM (SELECT $1::regclass AS i) x`, index).Scan(&entries, &fetched)
	return entries, fetched, err
}

// SetLocalForTest sets a setting for the rest of the transaction.
func (s *Querier) SetLocalForTest(ctx context.Context, name, value string) (string, error) {
	var v string
	err := s.db.QueryRow(ctx, `SELECT set_config($1, $2, true)`, name, value).Scan(&v)
	return v, err
}

// IndexScansOnlyForTest runs query (one text column) as the queue's hot
// statements run (indexScansOnly), by QueryRow, and returns its answer.
func (s *Querier) IndexScansOnlyForTest(ctx context.Context, query string) (string, error) {
	var v string
	err := s.indexScansOnly(ctx).QueryRow(ctx, query).Scan(&v)
	return v, err
}

// IndexScansOnlyRowsForTest is IndexScansOnlyForTest by Query, reading
// every row.
func (s *Querier) IndexScansOnlyRowsForTest(ctx context.Context, query string) ([]string, error) {
	rows, err := s.indexScansOnly(ctx).Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ConnForTest is what the store runs statements on: its transaction, or
// the pool.
func (s *Querier) ConnForTest(ctx context.Context) interface {
	QueryRow(context.Context, string, ...any) pgx.Row
} {
	return s.db
}

// ClaimedJob is claimedJob, for TestClaimedJobHasEveryColumn.
var ClaimedJob = claimedJob
