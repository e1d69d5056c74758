package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
)

// An expired lease sends its job back to the queue after the backoff, or
// fails it on its last try; a lease still heartbeated is left alone. Each
// writes its event (counted for /metrics) and its run ends with the lease;
// the runners waiting on the pool wake.
func TestTheLeaseRescuerRequeuesOrFailsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	retried := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	last := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.MaxAttempts = 1 })
	held := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	for range 3 {
		b.claim(t, r)
	}
	b.expire(t, retried.ID, last.ID)
	wakes := b.wakes(t)

	rescuer := NewLeaseRescuer(b.store, LeaseRescuerConfig{Interval: time.Hour})
	rescuer.testSignals.init()
	before := time.Now()
	started(t, rescuer)
	require.Equal(t, store.RescuedLeases{Requeued: 1, Failed: 1}, rescuer.testSignals.rescued.wait(t))
	after := time.Now()

	got := b.job(t, retried.ID)
	require.Equal(t, record.JobQueued, got.State)
	require.Equal(t, "lease of attempt 1 expired", got.StateReason)
	require.Nil(t, got.RunnerID)
	require.WithinRange(t, got.AvailableAt, before.Add(2*time.Second-time.Millisecond), after.Add(2*time.Second+time.Millisecond),
		"the first retry waits 2 s")
	require.Equal(t, []string{"SUBMITTED", "LEASED", "LEASE_EXPIRED"}, b.eventTypes(t, retried.ID))

	got = b.job(t, last.ID)
	require.Equal(t, record.JobFailed, got.State)
	require.Equal(t, "lease of attempt 1 expired; 1 of 1 attempts used", got.StateReason)
	require.Equal(t, []string{"SUBMITTED", "LEASED", "FAILED"}, b.eventTypes(t, last.ID))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM job_runs WHERE job_id = ANY($1) AND return_reason = 'lease expired'
		AND finished_at IS NOT NULL`, []uuid.UUID{retried.ID, last.ID}))

	require.Equal(t, record.JobLeased, b.job(t, held.ID).State)
	require.Equal(t, 1, b.counted("LEASE_EXPIRED"))
	require.Equal(t, 1, b.counted("FAILED"))
	b.wokePool(t, wakes)
}

// A lease another replica's rescuer has locked is passed over, not waited
// for, and taken back by a later pass once the lock is gone.
func TestTheLeaseRescuerPassesOverLockedLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	locked := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	free := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	b.claim(t, r)
	b.claim(t, r)
	b.expire(t, locked.ID, free.ID)
	other, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx) //nolint:errcheck // rolled back below
	_, err = other.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, locked.ID)
	require.NoError(t, err)

	rescuer := NewLeaseRescuer(b.store, LeaseRescuerConfig{Interval: 20 * time.Millisecond})
	rescuer.testSignals.init()
	started(t, rescuer)
	require.Equal(t, store.RescuedLeases{Requeued: 1}, rescuer.testSignals.rescued.wait(t))
	require.Equal(t, record.JobQueued, b.job(t, free.ID).State)
	require.Equal(t, record.JobLeased, b.job(t, locked.ID).State)

	require.NoError(t, other.Rollback(ctx))
	for res := (store.RescuedLeases{}); res.Requeued == 0; {
		res = rescuer.testSignals.rescued.wait(t)
	}
	require.Equal(t, record.JobQueued, b.job(t, locked.ID).State)
	require.Equal(t, 2, b.counted("LEASE_EXPIRED"), "each lease taken back once")
}

// Expired leases are read and taken back only inside the transaction that
// locks them (outside one, the rows would be free again before they were
// written, for another replica to take back too: the store offers both on
// a Tx alone), and what is taken back is what the rescuer may decide.
func TestExpiredLeasesAreTakenBackOnlyUnderTheirLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	b.claim(t, r)
	b.expire(t, j.ID)

	var jobs []store.ExpiredLease
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		var err error
		jobs, err = tx.ExpiredLeases(ctx, nil, 0)
		return err
	}))
	require.Len(t, jobs, 1)
	require.Equal(t, record.JobLeased, b.job(t, j.ID).State, "reading changes nothing")
	require.Zero(t, b.counted("LEASE_EXPIRED"))

	err := b.store.WithTx(ctx, func(tx *store.Tx) error {
		jobs, err := tx.ExpiredLeases(ctx, nil, 0)
		require.NoError(t, err)
		_, err = tx.RescueLeases(ctx, []store.LeaseRescue{{Job: jobs[0].Job, Transition: store.Transition{State: record.JobSucceeded}}})
		return err
	})
	require.ErrorIs(t, err, record.ErrInvalid)
	require.Equal(t, record.JobLeased, b.job(t, j.ID).State, "nothing changed")
}

// After a gap in which no replica reached the database (the clock's last
// pass a minute ago, as after an outage of PostgreSQL), the leases held
// when it began get their time back before any is taken back: their
// runners kept trying, and were answered "retry". A lease that ran out
// before the gap began is taken back as ever.
func TestAnOutageDoesNotUseUpHeldLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	held := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	abandoned := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	b.claim(t, r)
	b.claim(t, r)
	_, err := b.db.Exec(ctx, `INSERT INTO maintenance_clock (duty, last_pass_at) VALUES ('lease_rescuer', now() - interval '60 seconds')`)
	require.NoError(t, err)
	// One lease ran out 10 s ago, during the gap; the other before it.
	_, err = b.db.Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - CASE WHEN id = $1 THEN interval '10 seconds' ELSE interval '90 seconds' END
		WHERE id = ANY($2)`, held.ID, []uuid.UUID{held.ID, abandoned.ID})
	require.NoError(t, err)

	const pace = 100 * time.Millisecond
	rescuer := NewLeaseRescuer(b.store, LeaseRescuerConfig{Interval: pace})
	rescuer.testSignals.init()
	started(t, rescuer)
	credit := rescuer.testSignals.credited.wait(t)
	require.Equal(t, 1, credit.Leases)
	require.InDelta(t, time.Minute.Seconds(), credit.Gap.Seconds(), 5)
	require.Equal(t, credit.Gap-pace, credit.Credit)
	require.Equal(t, store.RescuedLeases{Requeued: 1}, rescuer.testSignals.rescued.wait(t))

	got := b.job(t, held.ID)
	require.Equal(t, record.JobLeased, got.State, "the held lease was not taken back")
	require.WithinDuration(t, time.Now().Add(50*time.Second), *got.LeaseExpiresAt, 5*time.Second, "it has the time it had left when the gap began")
	require.Equal(t, record.JobQueued, b.job(t, abandoned.ID).State)
	require.Equal(t, 1, b.counted("LEASE_EXPIRED"))

	// The passes after it measure gaps of their pace, and give nothing.
	for range 3 {
		rescuer.testSignals.rescued.wait(t)
	}
	select {
	case c := <-rescuer.testSignals.credited.ch:
		t.Fatalf("credited again: %+v", c)
	default:
	}
}

func TestOutageCredit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ gap, pace, want time.Duration }{
		{0, time.Second, 0},               // the first pass
		{time.Second, time.Second, 0},     // as paced
		{3 * time.Second, time.Second, 0}, // jitter
		{3*time.Second + time.Millisecond, time.Second, 2*time.Second + time.Millisecond},
		{45 * time.Second, time.Second, 44 * time.Second},   // PostgreSQL down 45 s
		{1040 * time.Millisecond, 20 * time.Millisecond, 0}, // a fast pace still allows a second
	} {
		require.Equal(t, c.want, queue.OutageCredit(c.gap, c.pace), "gap %v, pace %v", c.gap, c.pace)
	}
}
