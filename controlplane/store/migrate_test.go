package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/controlplane/store/storetest"
)

func TestMigrateFromEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, storetest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	v, err := store.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 0, v)
	require.ErrorIs(t, store.CheckSchema(ctx, pool), store.ErrSchemaOlder)

	applied, err := store.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Len(t, applied, store.LatestVersion())
	require.NoError(t, store.CheckSchema(ctx, pool))

	// A second run is a no-op.
	applied, err = store.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, applied)
}

func TestNewerSchemaIsRefusedAndLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	future := store.LatestVersion() + 1
	_, err := pool.Exec(ctx, "INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, 'from_the_future')", future)
	require.NoError(t, err)

	require.ErrorIs(t, store.CheckSchema(ctx, pool), store.ErrSchemaNewer)
	_, err = store.Migrate(ctx, pool)
	require.ErrorIs(t, err, store.ErrSchemaNewer)

	v, err := store.SchemaVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, future, v)
}

func TestConcurrentMigrationsApplyEachVersionOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, storetest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const n = 4
	total := make(chan int, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			applied, err := store.Migrate(ctx, pool)
			total <- len(applied)
			errs <- err
		}()
	}
	sum := 0
	for range n {
		sum += <-total
		require.NoError(t, <-errs)
	}
	require.Equal(t, store.LatestVersion(), sum)
}
