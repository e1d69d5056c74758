package store

import "context"

// SeqScansOfJobs is how many times the transaction in ctx has read the
// jobs table in full.
func (s *Store) SeqScansOfJobs(ctx context.Context) (n int64, err error) {
	err = s.conn(ctx).QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('jobs'::regclass)`).Scan(&n)
	return n, err
}
