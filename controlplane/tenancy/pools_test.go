package tenancy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
)

// An update is decided and stored whole or not at all: one refused (a pool
// outside the scope, a setting the database refuses) leaves the pool as it
// was, the parts of the change that were fine included. A setting left out
// stays; one returned to the default loses the pool's own value.
func TestUpdatePoolIsWholeOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := tenancy.New(storetest.TxStore(t), nil)
	orgA, err := s.CreateOrganisation(ctx, "org-a")
	require.NoError(t, err)
	orgB, err := s.CreateOrganisation(ctx, "org-b")
	require.NoError(t, err)
	poolA, err := s.CreatePool(ctx, record.NewPool{OrganisationID: &orgA.ID, Name: "gpu"})
	require.NoError(t, err)
	poolB, err := s.CreatePool(ctx, record.NewPool{OrganisationID: &orgB.ID, Name: "gpu"})
	require.NoError(t, err)
	inA := record.OneOrganisation(orgA.ID)

	name := "renamed"
	_, err = s.UpdatePool(ctx, inA, poolB.ID, tenancy.PoolChange{Name: &name, LeaseSeconds: tenancy.SetTo(60)})
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = s.UpdatePool(ctx, inA, poolA.ID, tenancy.PoolChange{Name: &name, LeaseSeconds: tenancy.SetTo(100000)})
	require.ErrorIs(t, err, record.ErrInvalid)
	for _, want := range []record.Pool{poolA, poolB} {
		got, err := s.Pool(ctx, record.AllOrganisations(), want.ID)
		require.NoError(t, err)
		require.Equal(t, want, got, "nothing changed")
	}

	yes := true
	p, err := s.UpdatePool(ctx, inA, poolA.ID, tenancy.PoolChange{
		Name: &name, LeaseSeconds: tenancy.SetTo(60), QueueTimeoutHours: tenancy.SetTo(2), AllowUnenforcedMemory: &yes,
	})
	require.NoError(t, err)
	sixty, two := 60, 2
	want := poolA
	want.Name, want.LeaseSeconds, want.QueueTimeoutHours, want.AllowUnenforcedMemory = name, &sixty, &two, true
	require.Equal(t, want, p)

	p, err = s.UpdatePool(ctx, inA, poolA.ID, tenancy.PoolChange{LeaseSeconds: tenancy.ToDefault()})
	require.NoError(t, err)
	want.LeaseSeconds = nil
	require.Equal(t, want, p, "back to the default, the rest as it was")
}
