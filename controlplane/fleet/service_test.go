package fleet_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// A control refused changes nothing: a retired runner is not resumed (it
// stays drained), and a runner outside the caller's scope is neither
// drained nor cleared. Allowed, the same controls do change the runner.
func TestRefusedControlsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.TxStore(t)
	orgA, err := st.CreateOrganisation(ctx, "org-a")
	require.NoError(t, err)
	orgB, err := st.CreateOrganisation(ctx, "org-b")
	require.NoError(t, err)
	pool, err := st.CreatePool(ctx, record.NewPool{OrganisationID: &orgA.ID, Name: "gpu"})
	require.NoError(t, err)
	retired := storetest.ApprovedRunner(t, st, pool.ID, 1, 1024, 0)
	other := storetest.ApprovedRunner(t, st, pool.ID, 1, 1024, 0)
	require.NoError(t, st.Retire(ctx, retired))
	f := fleet.NewService(st, nil)

	_, err = f.Resume(ctx, record.AllOrganisations(), retired)
	require.ErrorIs(t, err, fleet.ErrRetired)
	_, err = f.Drain(ctx, record.OneOrganisation(orgB.ID), other)
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = f.ClearQuarantine(ctx, record.OneOrganisation(orgB.ID), other)
	require.ErrorIs(t, err, record.ErrNotFound)

	got, err := f.Runner(ctx, record.AllOrganisations(), retired)
	require.NoError(t, err)
	require.True(t, got.Draining, "a retired runner stays drained")
	got, err = f.Runner(ctx, record.AllOrganisations(), other)
	require.NoError(t, err)
	require.False(t, got.Draining)

	got, err = f.Drain(ctx, record.OneOrganisation(orgA.ID), other)
	require.NoError(t, err)
	require.True(t, got.Draining)
	got, err = f.Resume(ctx, record.OneOrganisation(orgA.ID), other)
	require.NoError(t, err)
	require.False(t, got.Draining)
}

// Clearing a quarantine lets the runner take work again and takes what it
// reports now as its inventory, so the same difference does not
// quarantine it at the next heartbeat.
func TestClearingAQuarantineAcceptsTheReport(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	ctx := context.Background()
	require.NoError(t, y.st.SetInventory(ctx, y.runner, record.Inventory{MemoryMiB: 65536,
		GPUs: []record.InventoryGPU{{UUID: "GPU-a", MemoryTotalMiB: 81920}}}))
	now := runnerapi.Capacity{GPUs: []runnerapi.GPU{{UUID: "GPU-b", MemoryTotalMiB: 40960}}}
	got, err := y.beat(t, runnerapi.HeartbeatRequest{Capacity: now})
	require.NoError(t, err)
	require.True(t, got.Quarantined)

	f := fleet.NewService(y.st, nil)
	r, err := f.ClearQuarantine(ctx, record.AllOrganisations(), y.runner)
	require.NoError(t, err)
	require.Nil(t, r.QuarantinedAt)
	require.Equal(t, &record.Inventory{MemoryMiB: 65536, GPUs: []record.InventoryGPU{{UUID: "GPU-b", MemoryTotalMiB: 40960}}}, r.Inventory)
	got, err = y.beat(t, runnerapi.HeartbeatRequest{Capacity: now})
	require.NoError(t, err)
	require.False(t, got.Quarantined)
}

// A GPU's fault is cleared only where one is held: the GPU is back, and a
// GPU without one is refused, changing nothing.
func TestClearingAGPUFault(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	ctx := context.Background()
	f := fleet.NewService(y.st, nil)
	_, err := f.ClearGPUHealth(ctx, record.AllOrganisations(), y.runner, "GPU-a")
	var ie *record.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, `GPU "GPU-a" of runner `+y.runner.String()+` has no fault recorded`, ie.Msg)

	faulty := runnerapi.GPU{UUID: "GPU-a", MemoryTotalMiB: 81920, Fault: &runnerapi.GPUFault{UUID: "GPU-a", XID: 48, ObservedAt: time.Now().UTC()}}
	_, err = y.beat(t, runnerapi.HeartbeatRequest{Capacity: runnerapi.Capacity{GPUs: []runnerapi.GPU{faulty}}})
	require.NoError(t, err)
	require.Len(t, y.read(t).GPUFaults, 1)
	r, err := f.ClearGPUHealth(ctx, record.AllOrganisations(), y.runner, "GPU-a")
	require.NoError(t, err)
	require.Empty(t, r.GPUFaults)
}

// A pool's watch tells which runner may have changed, and nil when every
// runner of the pool must be read again (the pool itself changed, or a
// listener that reconnected may have missed changes); another pool's
// change, or a payload that names nothing, keeps it waiting.
func TestAPoolsWatch(t *testing.T) {
	t.Parallel()
	// A database of its own: any runner change on the shared one would
	// wake the watch (runner ids say nothing of their pool).
	db := storetest.NewPool(t)
	st := store.New(db)
	l := store.NewListener(db, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	pool, other, runner := uuid.New(), uuid.New(), uuid.New()
	w := fleet.NewService(st, l).WatchPool(pool)
	defer w.Close()
	notify := func(payload string) {
		_, err := db.Exec(context.Background(), "SELECT pg_notify($1, $2)", store.ChannelRunnerStatus, payload)
		require.NoError(t, err)
	}
	next := func() (*uuid.UUID, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return w.Next(ctx)
	}
	notify(store.PoolChanged + other.String())
	notify("not a runner")
	notify(runner.String())
	got, err := next()
	require.NoError(t, err)
	require.Equal(t, &runner, got)
	notify(store.PoolChanged + pool.String())
	got, err = next()
	require.NoError(t, err)
	require.Nil(t, got)

	short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	_, err = w.Next(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
