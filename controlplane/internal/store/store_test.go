package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
)

type testBundle struct {
	store *store.Store
	orgA  store.Organisation
	orgB  store.Organisation
	poolA store.Pool
	poolB store.Pool
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
	b.poolA, err = s.CreatePool(ctx, store.NewPool{OrganisationID: &b.orgA.ID, Name: "gpu"})
	require.NoError(t, err)
	b.poolB, err = s.CreatePool(ctx, store.NewPool{OrganisationID: &b.orgB.ID, Name: "gpu"})
	require.NoError(t, err)
	return b
}

func TestScopeBoundsPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))

	platform, err := b.store.CreatePool(ctx, store.NewPool{Name: "shared"})
	require.NoError(t, err)

	all, err := b.store.Pools(ctx, store.AllOrganisations(), store.PoolFilter{})
	require.NoError(t, err)
	require.Len(t, all, 3)

	onlyA, err := b.store.Pools(ctx, store.OneOrganisation(b.orgA.ID), store.PoolFilter{})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b.poolA.ID}, poolIDs(onlyA))

	// Asking for another organisation inside a narrow scope finds nothing.
	none, err := b.store.Pools(ctx, store.OneOrganisation(b.orgA.ID), store.PoolFilter{OrganisationID: &b.orgB.ID})
	require.NoError(t, err)
	require.Empty(t, none)

	plat, err := b.store.Pools(ctx, store.AllOrganisations(), store.PoolFilter{OnlyPlatform: true})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{platform.ID}, poolIDs(plat))

	_, err = b.store.Pool(ctx, store.OneOrganisation(b.orgA.ID), b.poolB.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.store.Pool(ctx, store.OneOrganisation(b.orgA.ID), platform.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = b.store.Pool(ctx, store.Scope{}, b.poolA.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the zero scope sees nothing")

	orgs, err := b.store.Organisations(ctx, store.OneOrganisation(b.orgB.ID))
	require.NoError(t, err)
	require.Len(t, orgs, 1)
	require.Equal(t, b.orgB.ID, orgs[0].ID)
}

func TestUpdatePoolOutsideScopeChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	called := false
	_, err := updatePool(ctx, b.store, store.OneOrganisation(b.orgA.ID), b.poolB.ID, func(p *store.Pool) {
		called = true
		p.Name = "stolen"
	})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.False(t, called)
	got, err := b.store.Pool(ctx, store.AllOrganisations(), b.poolB.ID)
	require.NoError(t, err)
	require.Equal(t, "gpu", got.Name)
}

func TestUpdatePoolSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	sixty := 60
	p, err := updatePool(ctx, b.store, store.OneOrganisation(b.orgA.ID), b.poolA.ID, func(p *store.Pool) {
		p.LeaseSeconds = &sixty
	})
	require.NoError(t, err)
	require.Equal(t, 60, *p.LeaseSeconds)
	require.Nil(t, p.QueueTimeoutHours)

	// Out of range: refused by the database, nothing stored.
	tooLong := 100000
	_, err = updatePool(ctx, b.store, store.OneOrganisation(b.orgA.ID), b.poolA.ID, func(p *store.Pool) {
		p.LeaseSeconds = &tooLong
	})
	require.ErrorIs(t, err, store.ErrInvalid)
	got, err := b.store.Pool(ctx, store.AllOrganisations(), b.poolA.ID)
	require.NoError(t, err)
	require.Equal(t, 60, *got.LeaseSeconds)
}

// updatePool is an update as tenancy makes one: lock, change, save, in one
// transaction.
func updatePool(ctx context.Context, s *store.Store, scope store.Scope, id uuid.UUID, change func(*store.Pool)) (store.Pool, error) {
	var out store.Pool
	err := s.WithTx(ctx, func(ctx context.Context) error {
		p, err := s.LockPool(ctx, scope, id)
		if err != nil {
			return err
		}
		change(&p)
		out, err = s.SavePool(ctx, p)
		return err
	})
	return out, err
}

// A lock taken outside a transaction would end before its caller could act
// on what it read, and a write resting on such a read could undo another's:
// the store refuses both, and what it refused changed nothing.
func TestLocksAndTheWritesOnThemNeedATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, storetest.TxStore(t))
	r := storetest.ApprovedRunner(t, b.store, b.poolA.ID, 1, 1024, 0)
	const refused = "needs the transaction that locks the rows"

	_, err := b.store.LockRunner(ctx, store.AllOrganisations(), r)
	require.ErrorContains(t, err, refused)
	err = b.store.SetRunnerStatus(ctx, r, store.RunnerDecision{Status: store.RunnerRevoked, Reason: "unlocked"}, nil)
	require.ErrorContains(t, err, refused)
	_, err = b.store.LockPool(ctx, store.AllOrganisations(), b.poolA.ID)
	require.ErrorContains(t, err, refused)
	renamed := b.poolA
	renamed.Name = "renamed"
	_, err = b.store.SavePool(ctx, renamed)
	require.ErrorContains(t, err, refused)

	runner, err := b.store.Runner(ctx, store.AllOrganisations(), r)
	require.NoError(t, err)
	require.Equal(t, store.RunnerApproved, runner.Status)
	pool, err := b.store.Pool(ctx, store.AllOrganisations(), b.poolA.ID)
	require.NoError(t, err)
	require.Equal(t, "gpu", pool.Name)

	// Inside one, the lock is taken, and only inside the scope.
	require.NoError(t, b.store.WithTx(ctx, func(ctx context.Context) error {
		locked, err := b.store.LockRunner(ctx, store.OneOrganisation(b.orgA.ID), r)
		require.NoError(t, err)
		require.Equal(t, r, locked.ID)
		_, err = b.store.LockRunner(ctx, store.OneOrganisation(b.orgB.ID), r)
		require.ErrorIs(t, err, store.ErrNotFound)
		return nil
	}))
}

func TestErrorsAreTheStoresOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.New(storetest.NewPool(t)))

	_, err := b.store.CreateOrganisation(ctx, "org-a")
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = b.store.CreateOrganisation(ctx, "Not A Handle!")
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = b.store.CreatePool(ctx, store.NewPool{OrganisationID: &b.orgA.ID, Name: "gpu"})
	require.ErrorIs(t, err, store.ErrConflict)
	missing := uuid.New()
	_, err = b.store.CreatePool(ctx, store.NewPool{OrganisationID: &missing, Name: "x"})
	require.ErrorIs(t, err, store.ErrNotFound)

	// Two platform pools may not share a name either (NULLS NOT DISTINCT).
	_, err = b.store.CreatePool(ctx, store.NewPool{Name: "p"})
	require.NoError(t, err)
	_, err = b.store.CreatePool(ctx, store.NewPool{Name: "p"})
	require.ErrorIs(t, err, store.ErrConflict)
}

func TestAdminTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, store.New(storetest.NewPool(t)))

	live := sha256.Sum256([]byte("live"))
	a, err := b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "alice", Role: store.RoleOrgAdmin, OrganisationID: &b.orgA.ID, TokenHash: live[:],
	})
	require.NoError(t, err)
	got, err := b.store.AdminByTokenHash(ctx, live[:])
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, store.OneOrganisation(b.orgA.ID), got.Scope())

	expired := sha256.Sum256([]byte("expired"))
	past := time.Now().Add(-time.Minute)
	_, err = b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "bob", Role: store.RolePlatformAdmin, TokenHash: expired[:], ExpiresAt: &past,
	})
	require.NoError(t, err)
	_, err = b.store.AdminByTokenHash(ctx, expired[:])
	require.ErrorIs(t, err, store.ErrNotFound)

	unknown := sha256.Sum256([]byte("unknown"))
	_, err = b.store.AdminByTokenHash(ctx, unknown[:])
	require.ErrorIs(t, err, store.ErrNotFound)

	// A platform admin with an organisation breaks the schema's rule.
	n, err := b.store.CountAdmins(ctx)
	require.NoError(t, err)
	bad := sha256.Sum256([]byte("bad"))
	_, err = b.store.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "eve", Role: store.RolePlatformAdmin, OrganisationID: &b.orgA.ID, TokenHash: bad[:],
	})
	require.ErrorIs(t, err, store.ErrInvalid)
	after, err := b.store.CountAdmins(ctx)
	require.NoError(t, err)
	require.Equal(t, n, after)
}

func poolIDs(ps []store.Pool) []uuid.UUID {
	out := make([]uuid.UUID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func TestContextOutlivingItsTransactionFallsBackToThePool(t *testing.T) {
	t.Parallel()
	s := store.New(storetest.NewPool(t))
	var inner context.Context
	require.NoError(t, s.WithTx(context.Background(), func(ctx context.Context) error {
		inner = ctx
		_, err := s.CreateOrganisation(ctx, "made-inside")
		return err
	}))
	// gqlgen resolves a mutation's result fields with the mutation's context,
	// after the transaction committed.
	orgs, err := s.Organisations(inner, store.AllOrganisations())
	require.NoError(t, err)
	require.Len(t, orgs, 1)

	// A savepoint that ended hands back to its still-open parent.
	require.NoError(t, s.WithTx(context.Background(), func(outer context.Context) error {
		var nested context.Context
		require.NoError(t, s.WithTx(outer, func(ctx context.Context) error { nested = ctx; return nil }))
		_, err := s.CreateOrganisation(nested, "in-parent")
		return err
	}))
	orgs, err = s.Organisations(context.Background(), store.AllOrganisations())
	require.NoError(t, err)
	require.Len(t, orgs, 2)
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
	hook := func(ctx context.Context, name string) { s.AfterCommit(ctx, func() { ran = append(ran, name) }) }
	require.NoError(t, s.WithTx(ctx, func(ctx context.Context) error {
		hook(ctx, "outer")
		require.Error(t, s.WithTx(ctx, func(ctx context.Context) error {
			hook(ctx, "rolled back")
			return errors.New("no")
		}))
		require.NoError(t, s.WithTx(ctx, func(ctx context.Context) error {
			hook(ctx, "released")
			return s.WithTx(ctx, func(ctx context.Context) error { hook(ctx, "released twice"); return nil })
		}))
		require.Empty(t, ran, "nothing before the commit")
		return nil
	}))
	require.Equal(t, []string{"outer", "released", "released twice"}, ran)

	ran = nil
	require.Error(t, s.WithTx(ctx, func(ctx context.Context) error {
		require.NoError(t, s.WithTx(ctx, func(ctx context.Context) error { hook(ctx, "released"); return nil }))
		return errors.New("no")
	}))
	require.Empty(t, ran, "an outer rollback runs none")
	hook(ctx, "no transaction")
	require.Equal(t, []string{"no transaction"}, ran, "at once")
}
