package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
)

// Ids go to PostgreSQL and back as themselves, NULL included, in the binary
// format the store uses and in text (the simple protocol).
func TestUUIDsRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	a, b := uuid.New(), uuid.New()
	const query = `SELECT $1::uuid, $1::uuid::text, $2::uuid, $3::uuid, $3::uuid IS NULL, $4::uuid[], $4::uuid[]::text`
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		var gotA, gotB uuid.UUID
		var text, arrayText string
		var null uuid.NullUUID
		var isNull bool
		var array []uuid.UUID
		err := pool.QueryRow(ctx, query, mode, a, uuid.NullUUID{UUID: b, Valid: true}, uuid.NullUUID{}, []uuid.UUID{a, b}).
			Scan(&gotA, &text, &gotB, &null, &isNull, &array, &arrayText)
		require.NoError(t, err, mode)
		require.Equal(t, a, gotA, mode)
		require.Equal(t, a.String(), text, mode)
		require.Equal(t, b, gotB, mode)
		require.Equal(t, uuid.NullUUID{}, null, mode)
		require.True(t, isNull, mode)
		require.Equal(t, []uuid.UUID{a, b}, array, mode)
		require.Equal(t, "{"+a.String()+","+b.String()+"}", arrayText, mode)

		var valid uuid.NullUUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, mode, a).Scan(&valid), mode)
		require.Equal(t, uuid.NullUUID{UUID: a, Valid: true}, valid, mode)
		// Without the codec (store.Connect registers it), pgx scans through
		// sql.Scanner, which leaves the zero id for a NULL: this is what fails.
		var notNull uuid.UUID
		require.ErrorContains(t, pool.QueryRow(ctx, `SELECT NULL::uuid`, mode).Scan(&notNull), "NULL", mode)
	}
}
