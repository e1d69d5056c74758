// Package store is the server's only way into PostgreSQL. Queries live in
// queries/*.sql and are generated into internal/dbsqlc by sqlc; this package
// turns generated rows into domain types, maps database errors to its own
// (ErrNotFound, ErrConflict, ErrInvalid, ErrUnavailable) and never lets a pgx error escape.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

// ErrContended: PostgreSQL ended the transaction to break a deadlock or a
// serialization conflict; the whole transaction may run again.
var ErrContended = errors.New("transaction lost to a concurrent one")

// DB is what the store runs on: a pool in production, a transaction in
// tests (Begin on a transaction opens a savepoint).
type DB interface {
	dbsqlc.DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
	// SendBatch: the queue's hot statements go with their planner settings
	// in one pipeline (see indexScansOnly).
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store reads and writes the control plane's state. Its statements run
// on the pool, each on its own; WithTx hands a Tx for statements that must
// commit together.
type Store struct {
	Querier
}

// shared is what a store and all its transactions have in common.
type shared struct {
	db DB // the pool: notifications are sent here, after the commit

	hooksMu     sync.Mutex // guards runnerHooks and jobEvents
	runnerHooks []func(channel, payload string)
	jobEvents   []func(typ string, n int)

	wakes wakes // long-polls to wake when a backoff ends (see wakeWhenAvailable)
}

// OnRunnerChange registers f to run after every commit that changed a
// runner's standing (status, inventory, controls, a revoked certificate),
// with the notification the commit sent other replicas: ChannelRunnerStatus
// and the runner's id, or ChannelRevocations and the serial. The runner
// listener uses it to drop what it cached of that runner before the change
// is even answered; other replicas hear the same by LISTEN/NOTIFY.
func (s *Store) OnRunnerChange(f func(channel, payload string)) {
	s.sh.hooksMu.Lock()
	s.sh.runnerHooks = append(s.sh.runnerHooks, f)
	s.sh.hooksMu.Unlock()
}

// OnJobEvents registers f to run after every commit that wrote job events,
// once per type, with how many of that type it wrote (/metrics counts
// them: LEASED is a lease granted, SUCCEEDED an outcome, and so on).
func (s *Store) OnJobEvents(f func(typ string, n int)) {
	s.sh.hooksMu.Lock()
	s.sh.jobEvents = append(s.sh.jobEvents, f)
	s.sh.hooksMu.Unlock()
}

// jobEventsHappened runs the job-event hooks for committed counts.
func (sh *shared) jobEventsHappened(events map[string]int) {
	if len(events) == 0 {
		return
	}
	sh.hooksMu.Lock()
	hooks := append([]func(string, int){}, sh.jobEvents...)
	sh.hooksMu.Unlock()
	for _, f := range hooks {
		for typ, n := range events {
			f(typ, n)
		}
	}
}

// New returns a store over db.
func New(db DB) *Store {
	return &Store{Querier{db: db, q: dbsqlc.New(), sh: &shared{db: db}}}
}

// DefaultMaxConns is the pool size when the URL does not set one
// (pool_max_conns). pgx's own default, the number of CPUs, starves a
// server whose requests each hold a connection while PostgreSQL syncs.
const DefaultMaxConns = 25

// Connect opens a pool for url. It does not check the schema; see
// CheckSchema.
func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("database url: cannot be parsed")
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	cfg.AfterConnect = registerUUIDCodec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectErr(err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectErr(err)
	}
	return pool, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// mapErr turns database errors into the store's own.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return record.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", record.ErrConflict, pgErr.ConstraintName)
		case "23514", "23502", "22001", "22003", "22021": // check, not null, too long, out of range, not UTF-8
			return fmt.Errorf("%w: %s", record.ErrInvalid, firstNonEmpty(pgErr.ConstraintName, pgErr.ColumnName, pgErr.Code))
		case "23503": // foreign_key_violation: the referenced row does not exist
			return record.ErrNotFound
		case "40P01", "40001": // deadlock_detected, serialization_failure
			return fmt.Errorf("%w (%w): %s", ErrContended, record.ErrUnavailable, pgErr.Code)
		}
		if unavailableCode(pgErr.Code) {
			return fmt.Errorf("%w: %s", record.ErrUnavailable, pgErr.Code)
		}
		return fmt.Errorf("database error %s", pgErr.Code)
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %v", record.ErrUnavailable, err)
	}
	return err
}

// unavailableCode: the server is shutting down, crashed, starting up or out
// of connections, or the connection failed.
func unavailableCode(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	}
	return strings.HasPrefix(code, "08") // connection exception
}

// connectErr is a failure to connect: ErrUnavailable when waiting may mend
// it (the server is down or starting), as it was otherwise (a password
// refused, a database that does not exist).
func connectErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && unavailableCode(pgErr.Code) || !errors.As(err, &pgErr) && unreachable(err) {
		return fmt.Errorf("connect to database: %w: %v", record.ErrUnavailable, err)
	}
	return fmt.Errorf("connect to database: %w", err)
}

// unreachable reports whether err is the database out of reach: no
// connection could be made, or the one in use broke.
func unreachable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return false // the caller left
	case errors.As(err, &connectErr), errors.As(err, &netErr), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return strings.Contains(err.Error(), "conn closed")
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// jobChangesPerNotification: 36-byte ids and commas, inside the 8000 bytes
// PostgreSQL takes in a payload.
const jobChangesPerNotification = 200

// send notifies, every channel in one statement (see the Notify query for
// why its commit does not wait for the WAL). Job changes go comma-joined,
// as few notifications as fit: jobs are leased and finished by the
// hundred, and a notification per job would cost about as much as the
// job's own writes.
func (sh *shared) send(notes map[string][]string) {
	if len(notes) == 0 {
		return
	}
	var channels, all []string
	for channel, payloads := range notes {
		seen := make(map[string]bool, len(payloads))
		distinct := payloads[:0:0]
		for _, p := range payloads {
			if !seen[p] {
				seen[p] = true
				distinct = append(distinct, p)
			}
		}
		if channel == ChannelJobChanges {
			var packed []string
			for len(distinct) > 0 {
				n := min(len(distinct), jobChangesPerNotification)
				packed = append(packed, strings.Join(distinct[:n], ","))
				distinct = distinct[n:]
			}
			distinct = packed
		}
		for _, p := range distinct {
			channels, all = append(channels, channel), append(all, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = dbsqlc.New().Notify(ctx, sh.db, dbsqlc.NotifyParams{Channels: channels, Payloads: all})
}
