// Package audit writes an administrator's change and its audit entry in one
// transaction. The API that takes a request knows who asks and for what
// (Expect); the domain package that makes the change opens the transaction
// and records the entry in it (Change), so an audited change and its
// record commit or vanish together.
package audit

import (
	"context"
	"sync/atomic"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

type pendingKey struct{}

// Pending is an audit entry waiting for the change it records.
type Pending struct {
	entry   record.AuditEntry
	written atomic.Bool
}

// Expect returns ctx carrying e, the entry of the change the request asks
// for, to be written by the transaction that makes it (see Change).
func Expect(ctx context.Context, e record.AuditEntry) (context.Context, *Pending) {
	p := &Pending{entry: e}
	return context.WithValue(ctx, pendingKey{}, p), p
}

// Written says whether a committed transaction holds the entry.
func (p *Pending) Written() bool { return p.written.Load() }

// Change runs fn in one transaction of st and writes in the same one the
// entry ctx carries, if any and not written already. fn failing rolls
// back both.
func Change(ctx context.Context, st *store.Store, fn func(tx *store.Tx) error) error {
	return st.WithTx(ctx, func(tx *store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return Record(ctx, tx)
	})
}

// Record writes the entry ctx carries in tx, if any and not written
// already; it counts as written once tx's outermost transaction commits.
func Record(ctx context.Context, tx *store.Tx) error {
	p, _ := ctx.Value(pendingKey{}).(*Pending)
	if p == nil || p.written.Load() {
		return nil
	}
	if err := tx.Audit(ctx, p.entry); err != nil {
		return err
	}
	tx.AfterCommit(func() { p.written.Store(true) })
	return nil
}

// Do is Change for a change that returns what it made.
func Do[T any](ctx context.Context, st *store.Store, fn func(tx *store.Tx) (T, error)) (T, error) {
	var out T
	err := Change(ctx, st, func(tx *store.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}
