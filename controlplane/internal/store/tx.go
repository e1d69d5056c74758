package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
)

// Querier runs the store's statements: on the pool for a Store, inside one
// transaction for a Tx. The methods both have are Querier's; the ones that
// only make sense under a transaction's locks (LockRunner, LockJobs, ...)
// are Tx's alone, so calling one outside a transaction does not compile.
type Querier struct {
	db DB // the pool, or the transaction
	q  *dbsqlc.Queries
	tx *txState // nil on the pool
	sh *shared
}

// Tx is one open transaction (or a savepoint inside one). It is good only
// inside the function WithTx handed it to: once that returns, every
// statement on it fails.
type Tx struct {
	Querier
}

// txState is what a transaction gathers for after its commit.
type txState struct {
	over   atomic.Bool
	parent *txState // the enclosing transaction of a savepoint

	mu          sync.Mutex // guards afterCommit, notes and events
	afterCommit []func()
	notes       map[string][]string // payloads by channel, sent after the commit
	events      map[string]int      // job events written, by type, counted after the commit
}

// errTxOver: a Tx used after the function it was handed to returned.
var errTxOver = errors.New("store: transaction used after it ended")

// WithTx runs fn in one transaction and commits when fn returns nil,
// rolling back otherwise. On a Tx it opens a savepoint: what fn changed
// is kept when fn returns nil, undone otherwise, and final only when the
// outermost transaction commits.
func (s *Querier) WithTx(ctx context.Context, fn func(tx *Tx) error) error {
	if s.tx != nil && s.tx.over.Load() {
		return errTxOver
	}
	ptx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	state := &txState{parent: s.tx}
	tx := &Tx{Querier{db: ptx, q: s.q, tx: state, sh: s.sh}}
	defer func() {
		state.over.Store(true)
		ptx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := ptx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	// Over first: a goroutine still holding tx can add nothing that the
	// hand-over below would miss.
	state.over.Store(true)
	if state.parent != nil {
		state.release()
		return nil
	}
	state.mu.Lock()
	hooks, notes, events := state.afterCommit, state.notes, state.events
	state.mu.Unlock()
	s.sh.send(notes)
	s.sh.jobEventsHappened(events)
	for _, f := range hooks {
		f()
	}
	return nil
}

// atomically runs fn in the transaction s is, or in one of its own on the
// pool: for the store's methods of several statements, which join their
// caller's transaction rather than open a savepoint in it (an error from
// them fails the caller's transaction all the same).
func (s *Querier) atomically(ctx context.Context, fn func(tx *Tx) error) error {
	if s.tx != nil {
		if s.tx.over.Load() {
			return errTxOver
		}
		return fn(&Tx{*s})
	}
	return s.WithTx(ctx, fn)
}

// WithTxRetry is WithTx, run again (up to three times in all) when
// PostgreSQL picks the transaction to break a deadlock. For transactions
// that take several rows' locks in an order the plan decides (a batch of
// results racing a heartbeat of the same runner). On a Tx there is nothing
// to retry: the outer transaction is lost too.
func (s *Querier) WithTxRetry(ctx context.Context, fn func(tx *Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.WithTx(ctx, fn)
		if s.tx != nil || attempt == 3 || !errors.Is(err, ErrContended) {
			return err
		}
	}
}

// AfterCommit runs f once the outermost transaction has committed (not at
// all if it rolls back), or at once on the pool. A savepoint's hooks go to
// its parent when it is released: what it changed is not visible to
// others, nor final, until the outermost transaction commits.
func (s *Querier) AfterCommit(f func()) {
	if s.tx == nil {
		f()
		return
	}
	s.tx.mu.Lock()
	s.tx.afterCommit = append(s.tx.afterCommit, f)
	s.tx.mu.Unlock()
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

// countJobEvents counts n events of typ for the job-event hooks. In a
// transaction the counts gather by type and the hooks run once per type
// after the commit; on the pool they run at once.
func (s *Querier) countJobEvents(typ string, n int) {
	if n == 0 {
		return
	}
	if s.tx == nil {
		s.sh.jobEventsHappened(map[string]int{typ: n})
		return
	}
	s.tx.mu.Lock()
	if s.tx.events == nil {
		s.tx.events = map[string]int{}
	}
	s.tx.events[typ] += n
	s.tx.mu.Unlock()
}

// runnerChanged tells every replica, once the transaction has committed,
// that a runner's standing changed: payload on channel
// (ChannelRunnerStatus: a runner id, or PoolChanged and a pool id;
// ChannelRevocations: a serial), to other replicas by NOTIFY and to this
// one's hooks (OnRunnerChange) directly.
func (s *Querier) runnerChanged(channel, payload string) {
	s.notifyAfterCommit(channel, payload)
	s.sh.hooksMu.Lock()
	hooks := append([]func(string, string){}, s.sh.runnerHooks...)
	s.sh.hooksMu.Unlock()
	for _, f := range hooks {
		s.AfterCommit(func() { f(channel, payload) })
	}
}

// notifyAfterCommit sends payloads on channel once the transaction has
// committed (at once on the pool). PostgreSQL holds an exclusive lock on
// its notification queue through the commit of every transaction that
// notified, WAL flush included, so notifying inside busy write transactions
// makes their commits take turns. Wake-ups need not be atomic with the
// change: whoever wakes re-reads the state, and a waiter that missed one
// wakes at its own timeout. A transaction's notifications are gathered and
// sent in one statement per channel, each payload once.
func (s *Querier) notifyAfterCommit(channel string, payloads ...string) {
	if len(payloads) == 0 {
		return // nothing to say: no round trip
	}
	if s.tx == nil {
		s.sh.send(map[string][]string{channel: payloads})
		return
	}
	s.tx.mu.Lock()
	if s.tx.notes == nil {
		s.tx.notes = map[string][]string{}
	}
	s.tx.notes[channel] = append(s.tx.notes[channel], payloads...)
	s.tx.mu.Unlock()
}

// notifyAllAfterCommit is notifyAfterCommit for several channels at once:
// outside a transaction, one statement for all of them.
func (s *Querier) notifyAllAfterCommit(notes map[string][]string) {
	for ch, payloads := range notes {
		if len(payloads) == 0 {
			delete(notes, ch)
		}
	}
	if len(notes) == 0 {
		return // nothing to say: no round trip
	}
	if s.tx == nil {
		s.sh.send(notes)
		return
	}
	for ch, payloads := range notes {
		s.notifyAfterCommit(ch, payloads...)
	}
}

// notifyJobChanges announces that jobs changed (their ids).
func (s *Querier) notifyJobChanges(ids ...string) {
	s.notifyAfterCommit(ChannelJobChanges, ids...)
}

// Ensure pgx.Tx satisfies DB, so a Tx's statements run where a pool's do.
var _ DB = pgx.Tx(nil)
