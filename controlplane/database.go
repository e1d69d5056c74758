package controlplane

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
)

// The store is internal to the control plane; these are what the server's
// commands (serve, migrate, bootstrap-admin) and other entry points need
// of the database.

// ErrUnavailable: the database cannot be reached for now (down, starting,
// out of connections); the same call may succeed later.
var ErrUnavailable = record.ErrUnavailable

// Connect opens a pool on the database at url, as the server uses it. It
// does not check the schema; see CheckSchema. A database that cannot be
// reached for now is ErrUnavailable.

func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return store.Connect(ctx, url)
}

// Migrate applies the migrations the database lacks, in order, and returns
// their versions (none: it was up to date). A database migrated by a newer
// binary is refused and left as it is.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return store.Migrate(ctx, pool)
}

// CheckSchema refuses a database whose schema is not exactly the one this
// binary knows, saying which of the two is behind.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return store.CheckSchema(ctx, pool)
}

// SchemaVersion is the schema version this binary knows: its newest
// migration.
func SchemaVersion() int { return store.LatestVersion() }

// BootstrapAdmin gives a fresh installation its first platform admin,
// audited, and returns its token: shown once, only its digest kept. With
// an admin in place it refuses (tenancy.ErrAdminsExist).
func BootstrapAdmin(ctx context.Context, pool *pgxpool.Pool, name string) (token string, err error) {
	return tenancy.New(store.New(pool), nil).Bootstrap(ctx, name)
}

// OpenQueue is the queue over pool alone, without a server around it: for
// a tool that drives the queue's statements on a connection of its own
// (the benchmark that measures what PostgreSQL spends on each). Nothing
// watches for its changes: its WatchJob must not be called.
func OpenQueue(pool *pgxpool.Pool) *queue.Service {
	return queue.NewService(store.New(pool), nil)
}
