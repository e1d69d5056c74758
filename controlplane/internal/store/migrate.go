package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var (
	// ErrSchemaNewer: the database was migrated by a newer runmesh. Running
	// against it could corrupt data this binary does not understand.
	ErrSchemaNewer = errors.New("database schema is newer than this binary knows")
	// ErrSchemaOlder: the database needs `runmesh-server migrate`.
	ErrSchemaOlder = errors.New("database schema is older than this binary needs")
)

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns the embedded migrations in order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(err) // embedded: cannot fail at run time
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			panic("badly named migration " + e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			panic(err)
		}
		v, _ := strconv.Atoi(m[1])
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("migration %04d_%s: versions must be 1..n without gaps", m.Version, m.Name))
		}
	}
	return out
}

// LatestVersion is the schema version this binary knows.
func LatestVersion() int { return len(Migrations()) }

const createVersionTable = `
CREATE TABLE IF NOT EXISTS runmesh_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// migrationLock serialises migrations across processes (several replicas
// or a `migrate` run beside a server); any constant works if it is ours.
const migrationLock = 0x72756e6d657368 // "runmesh"

// Migrate applies every migration the database lacks, each in its own
// transaction, and returns the versions applied. A database newer than this
// binary is refused untouched.
func Migrate(ctx context.Context, db DB) ([]int, error) {
	var applied []int
	for _, m := range Migrations() {
		done, err := applyOne(ctx, db, m)
		if err != nil {
			return applied, err
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func applyOne(ctx context.Context, db DB, m Migration) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
		return false, fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, createVersionTable); err != nil {
		return false, fmt.Errorf("migrate: version table: %w", err)
	}
	current, err := versionIn(ctx, tx)
	if err != nil {
		return false, err
	}
	if current > LatestVersion() {
		return false, fmt.Errorf("%w (database at %d, binary knows %d)", ErrSchemaNewer, current, LatestVersion())
	}
	if current >= m.Version {
		return false, nil
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migrate %04d_%s: %w", m.Version, m.Name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return false, fmt.Errorf("migrate %04d_%s: record: %w", m.Version, m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("migrate %04d_%s: commit: %w", m.Version, m.Name, err)
	}
	return true, nil
}

// SchemaVersion is the newest migration applied to the database (0: none).
func SchemaVersion(ctx context.Context, db DB) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('runmesh_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	return versionIn(ctx, db)
}

func versionIn(ctx context.Context, db DB) (int, error) {
	var v int
	if err := db.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM runmesh_schema_migrations").Scan(&v); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return v, nil
}

// CheckSchema refuses a database that is not exactly at LatestVersion, with
// ErrSchemaNewer or ErrSchemaOlder.
func CheckSchema(ctx context.Context, db DB) error {
	v, err := SchemaVersion(ctx, db)
	if err != nil {
		return err
	}
	switch latest := LatestVersion(); {
	case v > latest:
		return fmt.Errorf("%w (database at %d, binary knows %d): upgrade runmesh-server", ErrSchemaNewer, v, latest)
	case v < latest:
		return fmt.Errorf("%w (database at %d, binary needs %d): run `runmesh-server migrate`", ErrSchemaOlder, v, latest)
	}
	return nil
}
