package fleet_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
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
