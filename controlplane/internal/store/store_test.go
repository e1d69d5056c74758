package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

type testBundle struct {
	store *store.Store
	orgA  record.Organisation
	orgB  record.Organisation
	poolA record.Pool
	poolB record.Pool
}

// setup fills s with two organisations and a pool each. Tests that expect
// the database to refuse a statement pass a store of their own database:
// a refused statement aborts the transaction TxStore runs in.
func setup(t *testing.T, s *store.Store) testBundle {
	t.Helper()
	ctx := context.Background()
	var b testBundle
	var err error
	b.store = s
	b.orgA, err = s.CreateOrganisation(ctx, "org-a")
	require.NoError(t, err)
	b.orgB, err = s.CreateOrganisation(ctx, "org-b")
	require.NoError(t, err)
	b.poolA, err = s.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgA.ID, Name: "gpu"})
	require.NoError(t, err)
	b.poolB, err = s.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgB.ID, Name: "gpu"})
	require.NoError(t, err)
	return b
}

func TestScopeBoundsPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))

	platform, err := b.store.CreatePool(ctx, record.NewPool{Name: "shared"})
	require.NoError(t, err)

	all, err := b.store.Pools(ctx, record.AllOrganisations(), record.PoolFilter{})
	require.NoError(t, err)
	require.Len(t, all, 3)

	onlyA, err := b.store.Pools(ctx, record.OneOrganisation(b.orgA.ID), record.PoolFilter{})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{platform.ID, b.poolA.ID}, poolIDs(onlyA), "its own, and the platform's it may submit to")

	// Asking for another organisation inside a narrow scope finds nothing.
	none, err := b.store.Pools(ctx, record.OneOrganisation(b.orgA.ID), record.PoolFilter{OrganisationID: &b.orgB.ID})
	require.NoError(t, err)
	require.Empty(t, none)

	plat, err := b.store.Pools(ctx, record.AllOrganisations(), record.PoolFilter{OnlyPlatform: true})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{platform.ID}, poolIDs(plat))

	_, err = b.store.Pool(ctx, record.OneOrganisation(b.orgA.ID), b.poolB.ID)
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = b.store.Pool(ctx, record.OneOrganisation(b.orgA.ID), platform.ID)
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = b.store.Pool(ctx, record.Scope{}, b.poolA.ID)
	require.ErrorIs(t, err, record.ErrNotFound, "the zero scope sees nothing")
	usable, err := b.store.UsablePool(ctx, record.OneOrganisation(b.orgA.ID), platform.ID)
	require.NoError(t, err, "an organisation may submit to a platform pool")
	require.Equal(t, platform.ID, usable.ID)
	_, err = b.store.UsablePool(ctx, record.OneOrganisation(b.orgA.ID), b.poolB.ID)
	require.ErrorIs(t, err, record.ErrNotFound)
	_, err = b.store.UsablePool(ctx, record.Scope{}, platform.ID)
	require.ErrorIs(t, err, record.ErrNotFound, "the zero scope sees no platform pool either")
	none, err = b.store.Pools(ctx, record.Scope{}, record.PoolFilter{})
	require.NoError(t, err)
	require.Empty(t, none, "the zero scope lists nothing")

	orgs, err := b.store.Organisations(ctx, record.OneOrganisation(b.orgB.ID))
	require.NoError(t, err)
	require.Len(t, orgs, 1)
	require.Equal(t, b.orgB.ID, orgs[0].ID)
}

func TestUpdatePoolOutsideScopeChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	called := false
	_, err := updatePool(ctx, b.store, record.OneOrganisation(b.orgA.ID), b.poolB.ID, func(p *record.Pool) {
		called = true
		p.Name = "stolen"
	})
	require.ErrorIs(t, err, record.ErrNotFound)
	require.False(t, called)
	got, err := b.store.Pool(ctx, record.AllOrganisations(), b.poolB.ID)
	require.NoError(t, err)
	require.Equal(t, "gpu", got.Name)
}

func TestUpdatePoolSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	sixty := 60
	p, err := updatePool(ctx, b.store, record.OneOrganisation(b.orgA.ID), b.poolA.ID, func(p *record.Pool) {
		p.LeaseSeconds = &sixty
	})
	require.NoError(t, err)
	require.Equal(t, 60, *p.LeaseSeconds)
	require.Nil(t, p.QueueTimeoutHours)

	// Out of range: refused by the database, nothing stored.
	tooLong := 100000
	_, err = updatePool(ctx, b.store, record.OneOrganisation(b.orgA.ID), b.poolA.ID, func(p *record.Pool) {
		p.LeaseSeconds = &tooLong
	})
	require.ErrorIs(t, err, record.ErrInvalid)
	got, err := b.store.Pool(ctx, record.AllOrganisations(), b.poolA.ID)
	require.NoError(t, err)
	require.Equal(t, 60, *got.LeaseSeconds)
}

// updatePool is an update as tenancy makes one: lock, change, save, in one
// transaction.
func updatePool(ctx context.Context, s *store.Store, scope record.Scope, id uuid.UUID, change func(*record.Pool)) (record.Pool, error) {
	var out record.Pool
	err := s.WithTx(ctx, func(tx *store.Tx) error {
		p, err := tx.LockPool(ctx, scope, id)
		if err != nil {
			return err
		}
		change(&p)
		out, err = tx.SavePool(ctx, p)
		return err
	})
	return out, err
}

// Rows read FOR UPDATE outside a transaction are unlocked again before the
// caller can act on them, and another replica may take them meanwhile: the
// locking reads and the writes decided on them are a Tx's alone, so a call
// on the pool does not compile.
func TestLocksAndTheWritesOnThemNeedATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	r := storetest.ApprovedRunner(t, b.store, b.poolA.ID, 1, 1024, 0)

	for _, name := range []string{"LockRunner", "SetRunnerStatus", "LockPool", "SavePool", "LockJobs", "LockAdmins", "ExpiredLeases", "RescueLeases"} {
		_, onPool := reflect.TypeFor[*store.Store]().MethodByName(name)
		_, onTx := reflect.TypeFor[*store.Tx]().MethodByName(name)
		require.False(t, onPool, "%s is callable outside a transaction", name)
		require.True(t, onTx, "%s is not a Tx's", name)
	}

	// Inside one, the lock is taken, and only inside the scope.
	require.NoError(t, b.store.WithTx(ctx, func(tx *store.Tx) error {
		locked, err := tx.LockRunner(ctx, record.OneOrganisation(b.orgA.ID), r)
		require.NoError(t, err)
		require.Equal(t, r, locked.ID)
		_, err = tx.LockRunner(ctx, record.OneOrganisation(b.orgB.ID), r)
		require.ErrorIs(t, err, record.ErrNotFound)
		return nil
	}))
}

func TestErrorsAreTheStoresOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.New(storetest.NewPool(t)))

	_, err := b.store.CreateOrganisation(ctx, "org-a")
	require.ErrorIs(t, err, record.ErrConflict)
	_, err = b.store.CreateOrganisation(ctx, "Not A Handle!")
	require.ErrorIs(t, err, record.ErrInvalid)
	_, err = b.store.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgA.ID, Name: "gpu"})
	require.ErrorIs(t, err, record.ErrConflict)
	missing := uuid.New()
	_, err = b.store.CreatePool(ctx, record.NewPool{OrganisationID: &missing, Name: "x"})
	require.ErrorIs(t, err, record.ErrNotFound)

	// Two platform pools may not share a name either (NULLS NOT DISTINCT).
	_, err = b.store.CreatePool(ctx, record.NewPool{Name: "p"})
	require.NoError(t, err)
	_, err = b.store.CreatePool(ctx, record.NewPool{Name: "p"})
	require.ErrorIs(t, err, record.ErrConflict)
}

func TestAdminTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.New(storetest.NewPool(t)))

	live := sha256.Sum256([]byte("live"))
	a, err := b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "alice", Role: record.RoleOrgAdmin, OrganisationID: &b.orgA.ID, TokenHash: live[:],
	})
	require.NoError(t, err)
	got, err := b.store.AdminByTokenHash(ctx, live[:])
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, record.OneOrganisation(b.orgA.ID), got.Scope())

	expired := sha256.Sum256([]byte("expired"))
	past := time.Now().Add(-time.Minute)
	_, err = b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "bob", Role: record.RolePlatformAdmin, TokenHash: expired[:], ExpiresAt: &past,
	})
	require.NoError(t, err)
	_, err = b.store.AdminByTokenHash(ctx, expired[:])
	require.ErrorIs(t, err, record.ErrNotFound)

	unknown := sha256.Sum256([]byte("unknown"))
	_, err = b.store.AdminByTokenHash(ctx, unknown[:])
	require.ErrorIs(t, err, record.ErrNotFound)

	// A platform admin with an organisation breaks the schema's rule.
	n, err := b.store.CountAdmins(ctx)
	require.NoError(t, err)
	bad := sha256.Sum256([]byte("bad"))
	_, err = b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "eve", Role: record.RolePlatformAdmin, OrganisationID: &b.orgA.ID, TokenHash: bad[:],
	})
	require.ErrorIs(t, err, record.ErrInvalid)
	after, err := b.store.CountAdmins(ctx)
	require.NoError(t, err)
	require.Equal(t, n, after)
}

func poolIDs(ps []record.Pool) []uuid.UUID {
	out := make([]uuid.UUID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// A Tx is good only inside the function it was handed to: one kept after
// its transaction ended refuses statements, and nothing it was asked to do
// happens. A savepoint's ends with the savepoint, while its parent goes on.
func TestATxEndsWithItsFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	var kept *store.Tx
	require.NoError(t, s.WithTx(ctx, func(tx *store.Tx) error {
		kept = tx
		_, err := tx.CreateOrganisation(ctx, "made-inside")
		return err
	}))
	_, err := kept.CreateOrganisation(ctx, "made-after")
	require.Error(t, err)
	require.Error(t, kept.WithTx(ctx, func(*store.Tx) error { return nil }))

	require.NoError(t, s.WithTx(ctx, func(outer *store.Tx) error {
		var nested *store.Tx
		require.NoError(t, outer.WithTx(ctx, func(tx *store.Tx) error { nested = tx; return nil }))
		_, err := nested.CreateOrganisation(ctx, "in-ended-savepoint")
		require.Error(t, err)
		_, err = outer.CreateOrganisation(ctx, "in-parent")
		return err
	}))
	orgs, err := s.Organisations(ctx, record.AllOrganisations())
	require.NoError(t, err)
	var names []string
	for _, o := range orgs {
		names = append(names, o.Name)
	}
	require.ElementsMatch(t, []string{"made-inside", "in-parent"}, names)
}

// What runs after the commit is what the commit made true: hooks of a
// released savepoint run when the outermost transaction commits, those of
// a savepoint rolled back never do, nor any of a transaction rolled back.
// (Job-event counters rest on it.)
func TestAfterCommitFollowsSavepoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	var ran []string
	hook := func(q *store.Querier, name string) { q.AfterCommit(func() { ran = append(ran, name) }) }
	require.NoError(t, s.WithTx(ctx, func(tx *store.Tx) error {
		hook(&tx.Querier, "outer")
		require.Error(t, tx.WithTx(ctx, func(tx *store.Tx) error {
			hook(&tx.Querier, "rolled back")
			return errors.New("no")
		}))
		require.NoError(t, tx.WithTx(ctx, func(tx *store.Tx) error {
			hook(&tx.Querier, "released")
			return tx.WithTx(ctx, func(tx *store.Tx) error { hook(&tx.Querier, "released twice"); return nil })
		}))
		require.Empty(t, ran, "nothing before the commit")
		return nil
	}))
	require.Equal(t, []string{"outer", "released", "released twice"}, ran)

	ran = nil
	require.Error(t, s.WithTx(ctx, func(tx *store.Tx) error {
		require.NoError(t, tx.WithTx(ctx, func(tx *store.Tx) error { hook(&tx.Querier, "released"); return nil }))
		return errors.New("no")
	}))
	require.Empty(t, ran, "an outer rollback runs none")
	hook(&s.Querier, "no transaction")
	require.Equal(t, []string{"no transaction"}, ran, "at once")
}
