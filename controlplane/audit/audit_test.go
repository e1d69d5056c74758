package audit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

// A change and its entry commit or vanish together, and the entry is
// written once however many transactions the request commits.
func TestAChangeAndItsEntryGoTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	orgs := func() int {
		all, err := st.Organisations(ctx, record.AllOrganisations())
		require.NoError(t, err)
		return len(all)
	}
	entries := func() []record.AuditEntry {
		all, err := st.AuditLog(ctx, record.AuditFilter{}, record.Page{Limit: 100})
		require.NoError(t, err)
		return all
	}
	create := func(ctx context.Context, name string) error {
		_, err := audit.Do(ctx, st, func(tx *store.Tx) (record.Organisation, error) { return tx.CreateOrganisation(ctx, name) })
		return err
	}

	// Without an entry to write, a change is only a change.
	require.NoError(t, create(ctx, "plain"))
	require.Empty(t, entries())

	actx, pending := audit.Expect(ctx, record.AuditEntry{Action: "createOrganisation", Outcome: "OK"})
	require.NoError(t, create(actx, "audited"))
	require.True(t, pending.Written())
	require.NoError(t, create(actx, "same-request"))
	require.Len(t, entries(), 1, "one entry a request")

	// A change that fails writes no entry.
	actx, pending = audit.Expect(ctx, record.AuditEntry{Action: "createOrganisation", Outcome: "OK"})
	require.ErrorIs(t, create(actx, "audited"), record.ErrConflict)
	require.False(t, pending.Written())
	require.Len(t, entries(), 1)

	// An entry that cannot be written undoes the change.
	before := orgs()
	actx, pending = audit.Expect(ctx, record.AuditEntry{Action: "createOrganisation", Outcome: "OK", Detail: []byte("not json")})
	require.Error(t, create(actx, "unrecorded"))
	require.False(t, pending.Written())
	require.Equal(t, before, orgs(), "nothing changed")

	// Rolled back with an outer transaction, it is not written either.
	actx, pending = audit.Expect(ctx, record.AuditEntry{Action: "createOrganisation", Outcome: "OK"})
	require.Error(t, st.WithTx(actx, func(tx *store.Tx) error {
		if err := audit.Record(actx, tx); err != nil {
			return err
		}
		return errors.New("no")
	}))
	require.False(t, pending.Written())
	require.Len(t, entries(), 1)
}
