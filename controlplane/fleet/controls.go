package fleet

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store"
)

// Drain stops a runner taking new work; what it runs carries on. It does
// not touch whether the runner is online: only heartbeats do.
func Drain(ctx context.Context, s *store.Store, scope store.Scope, id uuid.UUID) (store.Runner, error) {
	return s.UpdateRunner(ctx, scope, id, func(ctx context.Context, _ store.Runner) error {
		return s.SetDraining(ctx, id, true)
	})
}

// Resume lets a drained runner take work again (a retired one stays out).
func Resume(ctx context.Context, s *store.Store, scope store.Scope, id uuid.UUID) (store.Runner, error) {
	return s.UpdateRunner(ctx, scope, id, func(ctx context.Context, r store.Runner) error {
		if r.RetiredAt != nil {
			return ErrRetired
		}
		return s.SetDraining(ctx, id, false)
	})
}

// ClearQuarantine lets a quarantined runner take work again and accepts
// what it reports now as its inventory, so the difference that quarantined
// it does not do so again at the next heartbeat.
func ClearQuarantine(ctx context.Context, s *store.Store, scope store.Scope, id uuid.UUID) (store.Runner, error) {
	return s.UpdateRunner(ctx, scope, id, func(ctx context.Context, r store.Runner) error {
		inv, err := InventoryOf(r)
		if err != nil {
			return err
		}
		return s.ClearQuarantine(ctx, id, inv)
	})
}
