package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Jobs that waited past their pool's queue timeout in force (the pool's
// own, or the default) end EXPIRED, with the reason and an event, blocked
// ones too; younger ones wait on.
func TestQueueTimeoutsExpireJobsThatWaitedTooLong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.runner(t, 8, 65536, 0)
	hour := 1
	short, err := b.store.CreatePool(ctx, record.NewPool{OrganisationID: b.pool.OrganisationID, Name: "short", QueueTimeoutHours: &hour})
	require.NoError(t, err)
	old := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	young := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	blocked := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	inShort := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.PoolID = short.ID })
	_, err = b.db.Exec(ctx, `UPDATE jobs SET submitted_at = now() - interval '25 hours' WHERE id = ANY($1)`, []uuid.UUID{old.ID, blocked.ID})
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE jobs SET submitted_at = now() - interval '2 hours', state = CASE WHEN id = $2 THEN 'BLOCKED' ELSE state END
		WHERE id = ANY($1)`, []uuid.UUID{young.ID, inShort.ID}, young.ID)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE jobs SET state = 'BLOCKED' WHERE id = $1`, blocked.ID)
	require.NoError(t, err)

	timeouts := NewQueueTimeouts(b.store, QueueTimeoutsConfig{Interval: time.Hour, DefaultQueueTimeoutHours: 24})
	timeouts.testSignals.init()
	started(t, timeouts)
	require.Equal(t, 3, timeouts.testSignals.expired.wait(t))
	for _, id := range []uuid.UUID{old.ID, blocked.ID, inShort.ID} {
		got := b.job(t, id)
		require.Equal(t, record.JobExpired, got.State)
		require.Equal(t, "waited longer than the pool's queue timeout", got.StateReason)
		require.NotNil(t, got.FinishedAt)
		require.Equal(t, "EXPIRED", b.eventTypes(t, id)[len(b.eventTypes(t, id))-1])
	}
	require.Equal(t, record.JobBlocked, b.job(t, young.ID).State, "2 hours of 24")
	require.Equal(t, 3, b.counted("EXPIRED"))
}

// Without a default timeout, every job of the pools that set none would
// expire at once: the service refuses to start.
func TestQueueTimeoutsNeedADefault(t *testing.T) {
	t.Parallel()
	timeouts := NewQueueTimeouts(nil, QueueTimeoutsConfig{})
	require.ErrorContains(t, timeouts.Start(context.Background()), "default queue timeout")
	timeouts.Stop()
}
