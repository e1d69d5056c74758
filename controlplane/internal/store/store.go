// Package store is the server's only way into PostgreSQL. Queries live in
// queries/*.sql and are generated into internal/dbsqlc by sqlc; this package
// turns generated rows into domain types, maps database errors to its own
// (ErrNotFound, ErrConflict, ErrInvalid) and never lets a pgx error escape.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
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

// Store reads and writes the control plane's state.
type Store struct {
	db DB
	q  *dbsqlc.Queries

	hooksMu     sync.Mutex // guards runnerHooks and jobEvents
	runnerHooks []func(channel, payload string)
	jobEvents   []func(typ string, n int)
}

// OnRunnerChange registers f to run after every commit that changed a
// runner's standing (status, inventory, controls, a revoked certificate),
// with the notification the commit sent other replicas: ChannelRunnerStatus
// and the runner's id, or ChannelRevocations and the serial. The runner
// listener uses it to drop what it cached of that runner before the change
// is even answered; other replicas hear the same by LISTEN/NOTIFY.
func (s *Store) OnRunnerChange(f func(channel, payload string)) {
	s.hooksMu.Lock()
	s.runnerHooks = append(s.runnerHooks, f)
	s.hooksMu.Unlock()
}

// OnJobEvents registers f to run after every commit that wrote job events,
// once per type, with how many of that type it wrote (/metrics counts
// them: LEASED is a lease granted, SUCCEEDED an outcome, and so on).
func (s *Store) OnJobEvents(f func(typ string, n int)) {
	s.hooksMu.Lock()
	s.jobEvents = append(s.jobEvents, f)
	s.hooksMu.Unlock()
}

// countJobEvents counts n events of typ for the job-event hooks. In a
// transaction the counts gather by type and the hooks run once per type
// after the commit (see WithTx); outside one they run at once.
func (s *Store) countJobEvents(ctx context.Context, typ string, n int) {
	if n == 0 {
		return
	}
	if state := liveTx(ctx); state != nil {
		state.mu.Lock()
		if state.events == nil {
			state.events = map[string]int{}
		}
		state.events[typ] += n
		state.mu.Unlock()
		return
	}
	s.jobEventsHappened(map[string]int{typ: n})
}

// jobEventsHappened runs the job-event hooks for committed counts.
func (s *Store) jobEventsHappened(events map[string]int) {
	if len(events) == 0 {
		return
	}
	s.hooksMu.Lock()
	hooks := append([]func(string, int){}, s.jobEvents...)
	s.hooksMu.Unlock()
	for _, f := range hooks {
		for typ, n := range events {
			f(typ, n)
		}
	}
}

// runnerChanged tells every replica, once the transaction in ctx has
// committed, that a runner's standing changed: payload on channel
// (ChannelRunnerStatus: a runner id, or PoolChanged and a pool id;
// ChannelRevocations: a serial), to other replicas by NOTIFY and to this
// one's hooks (OnRunnerChange) directly.
func (s *Store) runnerChanged(ctx context.Context, channel, payload string) {
	s.notifyAfterCommit(ctx, channel, payload)
	s.hooksMu.Lock()
	hooks := append([]func(string, string){}, s.runnerHooks...)
	s.hooksMu.Unlock()
	for _, f := range hooks {
		s.AfterCommit(ctx, func() { f(channel, payload) })
	}
}

// AfterCommit runs f once the outermost transaction in ctx has committed
// (not at all if it rolls back), or at once outside a transaction. A nested
// WithTx only releases a savepoint: what it changed is not visible to
// others, nor final, until the outermost one commits, and nothing of it
// happened if the savepoint rolls back, so its hooks go with it.
func (s *Store) AfterCommit(ctx context.Context, f func()) {
	state := liveTx(ctx)
	if state == nil {
		f()
		return
	}
	state.mu.Lock()
	state.afterCommit = append(state.afterCommit, f)
	state.mu.Unlock()
}

// liveTx is the innermost transaction or savepoint in ctx still open (nil
// outside any).
func liveTx(ctx context.Context) *txState {
	state, _ := ctx.Value(txKey{}).(*txState)
	for state != nil && state.over.Load() {
		state = state.parent
	}
	return state
}

// release hands what a released savepoint gathered to its parent, to run
// or send when the outermost transaction commits.
func (state *txState) release() {
	state.mu.Lock()
	hooks, notes, events := state.afterCommit, state.notes, state.events
	state.mu.Unlock()
	p := state.parent
	p.mu.Lock()
	defer p.mu.Unlock()
	p.afterCommit = append(p.afterCommit, hooks...)
	for channel, payloads := range notes {
		if p.notes == nil {
			p.notes = map[string][]string{}
		}
		p.notes[channel] = append(p.notes[channel], payloads...)
	}
	for typ, n := range events {
		if p.events == nil {
			p.events = map[string]int{}
		}
		p.events[typ] += n
	}
}

// New returns a store over db.
func New(db DB) *Store {
	return &Store{db: db, q: dbsqlc.New()}
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
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.conn(ctx).QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

type txKey struct{}

// txState is the transaction a context carries. Contexts outlive the call
// that made them (gqlgen hands a mutation's context on to the resolvers of
// its result fields), so once WithTx returns the context stops routing
// queries to the finished transaction.
type txState struct {
	tx     pgx.Tx
	over   atomic.Bool
	parent *txState // the enclosing transaction of a savepoint

	mu          sync.Mutex // guards afterCommit, notes and events
	afterCommit []func()
	notes       map[string][]string // payloads by channel, sent after the commit
	events      map[string]int      // job events written, by type, counted after the commit
}

// WithTx runs fn in one transaction: every store call made with the context
// fn receives joins it. It commits when fn returns nil and rolls back
// otherwise. Nested calls open savepoints.
func (s *Store) WithTx(ctx context.Context, fn func(ctx context.Context) error) error {
	// A savepoint's parent is the transaction it opens in (a finished one
	// in ctx is skipped).
	parent := liveTx(ctx)
	tx, err := s.conn(ctx).Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	state := &txState{tx: tx, parent: parent}
	defer func() {
		state.over.Store(true)
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	}()
	if err := fn(context.WithValue(ctx, txKey{}, state)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	// Finished first: a goroutine still holding ctx can add nothing that
	// the hand-over below would miss.
	state.over.Store(true)
	if parent != nil {
		state.release()
	} else {
		state.mu.Lock()
		hooks, notes, events := state.afterCommit, state.notes, state.events
		state.mu.Unlock()
		s.send(notes)
		s.jobEventsHappened(events)
		for _, f := range hooks {
			f()
		}
	}
	return nil
}

// WithTxRetry is WithTx, run again (up to three times in all) when
// PostgreSQL picks the transaction to break a deadlock. For transactions
// that take several rows' locks in an order the plan decides (a batch of
// results racing a heartbeat of the same runner). Inside an outer
// transaction there is nothing to retry: the outer one is lost too.
func (s *Store) WithTxRetry(ctx context.Context, fn func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := s.WithTx(ctx, fn)
		if nested := liveTx(ctx) != nil; nested || attempt == 3 || !errors.Is(err, ErrContended) {
			return err
		}
	}
}

// conn is the live transaction in ctx if there is one, otherwise the
// store's DB. A finished transaction hands back to its parent's.
func (s *Store) conn(ctx context.Context) DB {
	if state := liveTx(ctx); state != nil {
		return state.tx
	}
	return s.db
}

// mapErr turns database errors into the store's own.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
		case "23514", "23502", "22001", "22003", "22021": // check, not null, too long, out of range, not UTF-8
			return fmt.Errorf("%w: %s", ErrInvalid, firstNonEmpty(pgErr.ConstraintName, pgErr.ColumnName, pgErr.Code))
		case "23503": // foreign_key_violation: the referenced row does not exist
			return ErrNotFound
		case "40P01", "40001": // deadlock_detected, serialization_failure
			return fmt.Errorf("%w: %s", ErrContended, pgErr.Code)
		}
		return fmt.Errorf("database error %s", pgErr.Code)
	}
	return err
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// notifyAfterCommit sends payloads on channel once the transaction in ctx
// has committed (at once outside one). PostgreSQL holds an exclusive lock
// on its notification queue through the commit of every transaction that
// notified, WAL flush included, so notifying inside busy write transactions
// makes their commits take turns. Wake-ups need not be atomic with the
// change: whoever wakes re-reads the state, and a waiter that missed one
// wakes at its own timeout. A transaction's notifications are gathered and
// sent in one statement per channel, each payload once.
func (s *Store) notifyAfterCommit(ctx context.Context, channel string, payloads ...string) {
	if len(payloads) == 0 {
		return // nothing to say: no round trip
	}
	state := liveTx(ctx)
	if state == nil {
		s.send(map[string][]string{channel: payloads})
		return
	}
	state.mu.Lock()
	if state.notes == nil {
		state.notes = map[string][]string{}
	}
	state.notes[channel] = append(state.notes[channel], payloads...)
	state.mu.Unlock()
}

// notifyJobChanges announces that jobs changed (their ids).
func (s *Store) notifyJobChanges(ctx context.Context, ids ...string) {
	s.notifyAfterCommit(ctx, ChannelJobChanges, ids...)
}

// jobChangesPerNotification: 36-byte ids and commas, inside the 8000 bytes
// PostgreSQL takes in a payload.
const jobChangesPerNotification = 200

// send notifies, every channel in one statement (see the Notify query for
// why its commit does not wait for the WAL). Job changes go comma-joined,
// as few notifications as fit: jobs are leased and finished by the
// hundred, and a notification per job would cost about as much as the
// job's own writes.
func (s *Store) send(notes map[string][]string) {
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
	_ = s.q.Notify(ctx, s.db, dbsqlc.NotifyParams{Channels: channels, Payloads: all})
}
