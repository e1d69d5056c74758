package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

// A stored report that does not decode fails every read of its runner
// with an error that names the runner and the document, rather than
// handing up a runner without GPUs or capacity.
func TestAMalformedStoredReportFailsTheRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, capacity, gpus, want string
	}{
		{"capacity not an object", `["host"]`, `[]`, "stored capacity"},
		{"capacity field of the wrong type", `{"host": {"cores": "four"}}`, `[]`, "stored capacity"},
		{"gpus not a list", `{}`, `{"uuid": "GPU-1"}`, "stored gpus"},
		{"gpu field of the wrong type", `{}`, `[{"uuid": "GPU-1", "memory_total_mib": "80 GiB"}]`, "stored gpus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, storetest.TxStore(t))
			id := storetest.ApprovedRunner(t, b.store, b.poolA.ID, 1, 1024, 0)
			require.NoError(t, b.store.SetEnrolmentCapacity(ctx, id, store.ReportedCapacity{
				Capacity: []byte(tc.capacity), GPUs: []byte(tc.gpus), Cores: 1, MemoryMiB: 1024,
			}))
			requireReadsFail(t, b, id, "read runner "+id.String()+": "+tc.want+": ")
		})
	}
}

// So does a stored recovery proof that does not decode, and the request
// for work that reads it is refused, not taken for a runner without one.
func TestAMalformedStoredRecoveryProofFailsTheRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	id := storetest.ApprovedRunner(t, b.store, b.poolA.ID, 1, 1024, 0)
	require.NoError(t, b.store.RecordRecovery(ctx, id, []byte(`{"isolated": "yes"}`)))
	want := "read runner " + id.String() + ": stored recovery proof: "
	requireReadsFail(t, b, id, want)
	proof, err := b.store.TouchWorkRequest(ctx, id, []string{"default"})
	require.ErrorContains(t, err, want)
	require.Nil(t, proof)
}

// requireReadsFail checks every read of the runner: alone, in a list, and
// locked.
func requireReadsFail(t *testing.T, b testBundle, id uuid.UUID, want string) {
	t.Helper()
	ctx := context.Background()
	_, err := b.store.Runner(ctx, record.AllOrganisations(), id)
	require.ErrorContains(t, err, want)
	list, err := b.store.Runners(ctx, record.AllOrganisations(), record.RunnerFilter{PoolID: &b.poolA.ID}, record.Page{})
	require.ErrorContains(t, err, want)
	require.Empty(t, list)
	err = b.store.WithTx(ctx, func(tx *store.Tx) error {
		_, err := tx.LockRunner(ctx, record.AllOrganisations(), id)
		return err
	})
	require.ErrorContains(t, err, want)
}
