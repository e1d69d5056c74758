package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
)

// ClockTick is one pass of a maintenance duty as the maintenance clock saw
// it, by the database's clock.
type ClockTick struct {
	Previous time.Time // the duty's previous pass, by any replica (zero: none)
	Now      time.Time // this pass
}

// Gap is the time since the previous pass (0 for the first).
func (t ClockTick) Gap() time.Duration {
	if t.Previous.IsZero() {
		return 0
	}
	return t.Now.Sub(t.Previous)
}

// TickMaintenanceClock records a pass of duty now. The clock stays locked
// until the transaction ends, so the passes of every replica take turns
// and each measures the gap since the one before it.
func (s *Tx) TickMaintenanceClock(ctx context.Context, duty string) (ClockTick, error) {
	var t ClockTick
	prev, err := s.q.LockMaintenanceClock(ctx, s.db, duty)
	switch {
	case err == nil:
		t.Previous = prev
	case !errors.Is(err, pgx.ErrNoRows):
		return ClockTick{}, fmt.Errorf("read maintenance clock: %w", mapErr(err))
	}
	if t.Now, err = s.q.TickMaintenanceClock(ctx, s.db, duty); err != nil {
		return ClockTick{}, fmt.Errorf("tick maintenance clock: %w", mapErr(err))
	}
	return t, nil
}

// CreditLeases adds credit to every lease still held at since (expiring
// after it), and returns how many it extended. For the gap after since in
// which the leases could not be heartbeated through no fault of their
// runners.
func (s *Tx) CreditLeases(ctx context.Context, since time.Time, credit time.Duration) (int, error) {
	n, err := s.q.CreditLeases(ctx, s.db, dbsqlc.CreditLeasesParams{CreditSeconds: credit.Seconds(), Since: since})
	if err != nil {
		return 0, fmt.Errorf("credit leases: %w", mapErr(err))
	}
	return int(n), nil
}
