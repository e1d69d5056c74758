package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/stretchr/testify/require"
)

// The job pruner deletes jobs that ended longer ago than the retention,
// with their events, and nothing else: not a job that ended since, nor one
// still queued or held, however old.
func TestTheJobPrunerDeletesJobsPastTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	held := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	b.claim(t, r)
	queued := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	old := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	recent := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	for _, id := range []uuid.UUID{old.ID, recent.ID} {
		_, err := b.store.CancelJob(ctx, record.AllOrganisations(), id)
		require.NoError(t, err)
	}
	_, err := b.db.Exec(ctx, `UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = $1`, old.ID)
	require.NoError(t, err)

	pruner := NewJobPruner(b.store, PrunerConfig{Interval: time.Hour, Retention: time.Hour})
	pruner.testSignals.init()
	started(t, pruner)
	require.Equal(t, jobPrunePass{Jobs: 1}, pruner.testSignals.pruned.wait(t))
	require.Zero(t, b.count(t, `SELECT count(*) FROM jobs WHERE id = $1`, old.ID))
	require.Zero(t, b.count(t, `SELECT count(*) FROM job_events WHERE job_id = $1`, old.ID))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM jobs WHERE id = ANY($1)`, []uuid.UUID{held.ID, queued.ID, recent.ID}))
}

// A pass stops at its budget, between batches, and the next goes on where
// there is work left.
func TestTheJobPrunerStopsAtItsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ids []uuid.UUID
	for range 5 {
		ids = append(ids, b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}).ID)
	}
	_, err := b.db.Exec(ctx, `UPDATE jobs SET state = 'CANCELLED', finished_at = now() - interval '2 hours' WHERE id = ANY($1)`, ids)
	require.NoError(t, err)

	pruner := NewJobPruner(b.store, PrunerConfig{Interval: 20 * time.Millisecond, Retention: time.Hour, Batch: 2})
	pruner.budget = time.Nanosecond // spent by the first batch
	pruner.testSignals.init()
	started(t, pruner)
	for _, want := range []jobPrunePass{{Jobs: 2, Cut: true}, {Jobs: 2, Cut: true}, {Jobs: 1}, {}} {
		require.Equal(t, want, pruner.testSignals.pruned.wait(t))
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM jobs`))
}

// The certificate pruner deletes certificates long expired, and keeps those
// expired lately and each runner's newest.
func TestTheCertificatePrunerDeletesLongExpiredCertificates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	_, err := b.db.Exec(ctx, `
		INSERT INTO certificates (serial, runner_id, der, not_before, not_after)
		VALUES ('1001', $1, '\x00', now() - interval '51 days', now() - interval '50 days'),
		       ('1002', $1, '\x00', now() - interval '41 days', now() - interval '40 days'),
		       ('1003', $1, '\x00', now() - interval '11 days', now() - interval '10 days'),
		       ('2001', $2, '\x00', now() - interval '41 days', now() - interval '40 days')`, r, b.runner(t, 1, 1024, 0))
	require.NoError(t, err)

	pruner := NewCertificatePruner(b.store, PrunerConfig{Interval: time.Hour, Batch: 1})
	pruner.testSignals.init()
	started(t, pruner)
	require.Equal(t, certificatePrunePass{Certificates: 2}, pruner.testSignals.pruned.wait(t), "batch after batch")
	require.Zero(t, b.count(t, `SELECT count(*) FROM certificates WHERE serial IN ('1001', '1002')`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM certificates WHERE serial = '1003'`), "10 days expired: kept")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM certificates WHERE serial = '2001'`), "its runner's newest: kept")
}

// The audit pruner deletes entries past the retention, and keeps the
// others.
func TestTheAuditPrunerDeletesEntriesPastTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.Exec(ctx, `
		INSERT INTO audit_log (at, actor_name, actor_role, action, outcome)
		VALUES (now() - interval '3 hours', 'a', 'PLATFORM_ADMIN', 'old', 'ok'),
		       (now() - interval '2 hours', 'a', 'PLATFORM_ADMIN', 'old', 'ok'),
		       (now(), 'a', 'PLATFORM_ADMIN', 'new', 'ok')`)
	require.NoError(t, err)

	pruner := NewAuditPruner(b.store, PrunerConfig{Interval: time.Hour, Retention: time.Hour, Batch: 1})
	pruner.testSignals.init()
	started(t, pruner)
	require.Equal(t, 2, pruner.testSignals.pruned.wait(t), "batch after batch")
	require.Zero(t, b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'old'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'new'`))
}

// Services start together; when one cannot, those started before it are
// stopped again, free to start afresh.
func TestAMaintainerStartsAllOrNone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rescuer := NewLeaseRescuer(b.store, LeaseRescuerConfig{Interval: time.Hour})
	m := NewMaintainer(rescuer, NewQueueTimeouts(b.store, QueueTimeoutsConfig{}))
	require.ErrorContains(t, m.Start(context.Background()), "default queue timeout")
	require.NoError(t, rescuer.Start(context.Background()), "stopped again")
	rescuer.Stop()

	m = NewMaintainer(rescuer, NewQueueTimeouts(b.store, QueueTimeoutsConfig{DefaultQueueTimeoutHours: 24}))
	require.NoError(t, m.Start(context.Background()))
	m.Stop()
}
