package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// StopWaiting records that the runner no longer waits for work (its long
// poll went away without work, or it was drained or retired). Runners of
// its pool with more room that wait are woken to claim again: their claims
// passed over the jobs it would have taken. A runner that was not waiting
// costs one statement and wakes nobody.
func (s *Querier) StopWaiting(ctx context.Context, runnerID uuid.UUID) error {
	rows, err := s.q.StopWaiting(ctx, s.db, runnerID)
	if err != nil {
		return mapErr(err)
	}
	for _, r := range rows {
		if r.Wake {
			s.notifyAfterCommit(ChannelJobs, r.PoolID.String())
		}
	}
	return nil
}

// waitGrace is how long past its end a wait's row is kept: a runner that
// asks again at once (nearly every one) rewrites it instead.
const waitGrace = time.Minute

// PruneWaits removes the rows of waits that ended over a minute ago and
// returns how many.
func (s *Querier) PruneWaits(ctx context.Context) (int, error) {
	n, err := s.q.PruneWaits(ctx, s.db, int32(waitGrace.Seconds()))
	return int(n), mapErr(err)
}
