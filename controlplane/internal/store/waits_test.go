package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// A runner that stops waiting without work (its request went away, it was
// drained or retired), or whose room shrank while it waited, no longer
// keeps jobs from runners with more room, and wakes those that wait.
func TestARunnerThatStopsWaitingLetsGoOfWhatWasLeftToIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(*store.Store, uuid.UUID) error
	}{
		{"its request ended", func(s *store.Store, r uuid.UUID) error { return s.StopWaiting(context.Background(), r) }},
		{"drained", func(s *store.Store, r uuid.UUID) error { return s.SetDraining(context.Background(), r, true) }},
		{"retired", func(s *store.Store, r uuid.UUID) error { return s.Retire(context.Background(), r) }},
		{"a hold on a GPU of its", func(s *store.Store, r uuid.UUID) error {
			_, err := s.CreateHold(context.Background(), record.AllOrganisations(), r, 1, "maintenance", time.Now().Add(time.Hour), nil)
			return err
		}},
		{"quarantined for host faults", func(s *store.Store, r uuid.UUID) error {
			return s.CountFailures(context.Background(), r, []bool{true}, 1)
		}},
		{"quarantined by its heartbeat", func(s *store.Store, r uuid.UUID) error {
			_, err := s.RecordHeartbeats(context.Background(), []store.Heartbeat{{RunnerID: r, Drift: "a GPU is gone", Health: []byte(`[]`),
				ReportedCapacity: store.ReportedCapacity{Capacity: []byte(`{}`), GPUs: []byte(`[]`), Cores: 8, MemoryMiB: 65536, GPUCount: 2, GPUsHealthy: 2}}}, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := jobsSetup(t)
			small, big := b.runner(t, 8, 65536, 2), b.runner(t, 8, 65536, 8)
			b.waitFor(t, big, small)
			j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
			_, ok, err := b.store.ClaimJob(ctx, waiting(big))
			require.NoError(t, err)
			require.False(t, ok, "left to the smaller runner, which waits")

			l := listening(ctx, b.db)
			work := l.Subscribe(store.ChannelJobs)
			defer work.Close()
			require.NoError(t, tc.stop(b.store, small))
			wakesPool(t, work, b.pool.ID)
			require.Zero(t, b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1", small))

			got, ok, err := b.store.ClaimJob(ctx, waiting(big))
			require.NoError(t, err)
			require.True(t, ok, "no longer left to it")
			require.Equal(t, j.ID, got.ID)
		})
	}
}

// A runner that was not waiting, or that nobody with more room waits
// behind, wakes nobody when it stops.
func TestStoppingAWaitNobodyWaitsBehindWakesNobody(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := jobsSetup(t)
	small, big := b.runner(t, 8, 65536, 0), b.runner(t, 64, 65536, 0)
	l := listening(ctx, b.db)
	work := l.Subscribe(store.ChannelJobs)
	defer work.Close()

	require.NoError(t, b.store.StopWaiting(ctx, small), "not waiting")
	b.waitFor(t, small, big)
	require.NoError(t, b.store.StopWaiting(ctx, big), "only one with less room waits")
	require.NoError(t, b.store.StopWaiting(ctx, big), "again")
	wakesNobody(t, work, "nobody with more room waits behind")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM runner_waits WHERE pool_id = $1", b.pool.ID), "the other still waits")

	// A wait already over kept nothing from anyone.
	b.waitFor(t, big)
	_, err := b.db.Exec(ctx, `UPDATE runner_waits SET until = now() - interval '1 second' WHERE runner_id = $1`, small)
	require.NoError(t, err)
	require.NoError(t, b.store.StopWaiting(ctx, small))
	wakesNobody(t, work, "had stopped waiting already")
	require.Zero(t, b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1", small), "its row goes all the same")
}

// The rows of waits long ended are pruned; the others stay.
func TestPruneWaitsDropsOnlyWaitsLongEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	ended, recent, live := b.runner(t, 8, 65536, 0), b.runner(t, 8, 65536, 0), b.runner(t, 8, 65536, 0)
	b.waitFor(t, ended, recent, live)
	_, err := b.db.Exec(ctx, `UPDATE runner_waits SET until = now() - interval '61 seconds' WHERE runner_id = $1`, ended)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE runner_waits SET until = now() - interval '50 seconds' WHERE runner_id = $1`, recent)
	require.NoError(t, err)

	n, err := b.store.PruneWaits(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1", ended))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id IN ($1, $2)", recent, live))
}

// count is a count(*) query's answer.
func (b jobsBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}
