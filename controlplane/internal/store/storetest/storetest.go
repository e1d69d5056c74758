// Package storetest gives tests a real, migrated PostgreSQL database.
//
// `make test` runs the tests under withpg, which exports TEST_DATABASE_URL
// for a throwaway server. The first caller in a test binary builds a
// template database with every migration applied (once per migration set,
// across parallel test binaries); after that:
//
//   - TxStore gives a store over one transaction, rolled back when the test
//     ends: cheap isolation for tests that use one connection.
//   - SharedPool is a pool on the database Tx's transactions run in, for
//     tests that need several connections, LISTEN/NOTIFY or real commits
//     but only read what they wrote themselves.
//   - NewDatabase clones the template into a database of the test's own, for
//     tests that need the whole database to themselves.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// ServerURL is the harness's server (its maintenance database).
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run the tests with `make test`, which starts a throwaway PostgreSQL")
	}
	return u
}

// WithDatabase returns base pointing at database db instead.
func WithDatabase(t testing.TB, base, db string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + db
	return u.String()
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

func template(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { templateName, templateErr = buildTemplate(ServerURL(t)) })
	if templateErr != nil {
		t.Fatalf("template database: %v", templateErr)
	}
	return templateName
}

func buildTemplate(server string) (string, error) {
	h := sha256.New()
	for _, m := range store.Migrations() {
		fmt.Fprintf(h, "%d\x00%s\x00", m.Version, m.SQL)
	}
	name := "runmesh_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	// Test binaries of several packages run at once: one builds, the others wait.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock(4242)") //nolint:errcheck
	if exists, err := databaseExists(ctx, conn, name); err != nil || exists {
		return name, err
	}
	// Build under another name and rename, so a crash half-way leaves no
	// half-migrated template behind under the real name.
	building := fmt.Sprintf("runmesh_building_%d", os.Getpid())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	u, _ := url.Parse(server)
	u.Path = "/" + building
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return "", err
	}
	_, err = store.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", err
	}
	return name, nil
}

func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var exists bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	return exists, err
}

// NewDatabase creates a database of the test's own, migrated to the latest
// schema, and drops it when the test ends. It returns the database's URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, template(t))
}

// NewEmptyDatabase is NewDatabase without the migrations.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template0")
}

func newDatabase(t testing.TB, from string) string {
	t.Helper()
	ctx := context.Background()
	server := ServerURL(t)
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("connect to test server: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 8)
	rand.Read(b)
	name := "runmesh_t_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, from)); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("drop test database: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return WithDatabase(t, server, name)
}

// NewPool is a pool on a database of the test's own (see NewDatabase).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	// store.Connect, as the server does: the same pool settings and types.
	pool, err := store.Connect(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewEmptyPool is a pool on an empty database of the test's own, with no
// migrations applied (see NewEmptyDatabase).
func NewEmptyPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Connect(context.Background(), NewEmptyDatabase(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var (
	sharedOnce sync.Once
	sharedPool *pgxpool.Pool
	sharedErr  error
)

// shared is the pool on the database shared by the test binary.
func shared(t testing.TB) *pgxpool.Pool {
	t.Helper()
	sharedOnce.Do(func() {
		// Shared for the life of the test binary; the harness throws the
		// whole server away afterwards, and the next binary to start drops
		// it if it outlives the binary (cloneShared).
		var u string
		u, sharedErr = cloneShared(t)
		if sharedErr == nil {
			sharedPool, sharedErr = store.Connect(context.Background(), u)
		}
	})
	if sharedErr != nil {
		t.Fatalf("shared test database: %v", sharedErr)
	}
	return sharedPool
}

// Tx is a transaction on a database shared by the test binary, rolled back
// when the test ends: nothing a test writes is seen by any other.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	tx, err := shared(t).Begin(context.Background())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
	return tx
}

// SharedPool is a pool on the database shared by the test binary (the one
// Tx's transactions run in), for a test that needs several connections,
// LISTEN/NOTIFY or real commits, at the cost of one database for the whole
// binary instead of one per test. What the test commits stays, seen by
// the binary's other tests: each makes its own organisation, pool and
// runners and reads only those, and none may count what the whole
// database holds or wait for a notification naming nothing.
func SharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return shared(t)
}

// sharedLock is the advisory lock class (pg_advisory_lock(int, int)) that
// marks a shared database as its test binary's while the binary runs.
const sharedLock = 4243

// sharedOwner holds the lock on the binary's shared database for the
// binary's life: its session ends with the process.
var sharedOwner *pgx.Conn

// cloneShared makes the binary's shared database. A binary killed before
// its end (a test past its -timeout, a mutant gremlins stopped) leaves its
// own behind: the next to start drops every one whose binary is gone,
// which the lock tells, wherever that binary ran.
func cloneShared(t testing.TB) (string, error) {
	ctx := context.Background()
	server := ServerURL(t)
	from := template(t)
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", err
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := fmt.Sprintf("runmesh_shared_%d_%s", os.Getpid(), hex.EncodeToString(b))
	// Held before the database exists: another binary starting meanwhile
	// must not take it for a leftover.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", sharedLock, name); err != nil {
		conn.Close(ctx)
		return "", err
	}
	sharedOwner = conn
	if err := dropLeftShared(ctx, conn); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, from)); err != nil {
		return "", err
	}
	return WithDatabase(t, server, name), nil
}

// dropLeftShared drops the shared databases whose binaries are gone: those
// whose lock is free.
func dropLeftShared(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'runmesh\_shared\_%'`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		var free bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", sharedLock, name).Scan(&free); err != nil {
			return err
		}
		if !free {
			continue
		}
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		if _, uerr := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", sharedLock, name); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TxStore is a store over Tx(t).
func TxStore(t testing.TB) *store.Store {
	t.Helper()
	return store.New(Tx(t))
}
