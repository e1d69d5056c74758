package fleet

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Service is the fleet as administrators see it: runners, what they have
// booked, and the controls on them.
type Service struct {
	st       *store.Store
	listener *store.Listener
}

// NewService is the fleet over st; listener wakes WatchPool (nil: none, and
// WatchPool must not be called).
func NewService(st *store.Store, listener *store.Listener) *Service {
	return &Service{st: st, listener: listener}
}

// Runner is one runner inside scope, or record.ErrNotFound.
func (s *Service) Runner(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	return s.st.Runner(ctx, scope, id)
}

// Runners lists the runners inside scope that match f, oldest first: a
// page of them, or all when p.Limit is 0.
func (s *Service) Runners(ctx context.Context, scope record.Scope, f record.RunnerFilter, p record.Page) ([]record.Runner, error) {
	return s.st.Runners(ctx, scope, f, p)
}

// Runs lists a page of a runner's ended attempts, newest first, for a
// runner the caller has read through its scope.
func (s *Service) Runs(ctx context.Context, runnerID uuid.UUID, p record.Page) ([]record.JobRun, error) {
	return s.st.RunsOfRunner(ctx, runnerID, p)
}

// Bookings is what each runner's jobs and holds take, for runners the
// caller has read through its scope (for dataloaders).
func (s *Service) Bookings(ctx context.Context, runnerIDs []uuid.UUID) (map[uuid.UUID]record.Booking, error) {
	return s.st.Bookings(ctx, runnerIDs)
}

// RunnerSeen is the newest heartbeat in each pool, for pools the caller
// has read through its scope; pools never heartbeated in are absent.
func (s *Service) RunnerSeen(ctx context.Context, poolIDs []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	return s.st.RunnerSeen(ctx, poolIDs)
}

// Drain stops a runner taking new work; what it runs carries on. It does
// not touch whether the runner is online: only heartbeats do.
func (s *Service) Drain(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	return s.control(ctx, scope, id, func(ctx context.Context, tx *store.Tx, r record.Runner) error {
		return tx.SetDraining(ctx, r.ID, true)
	})
}

// Resume lets a drained runner take work again (a retired one stays out).
func (s *Service) Resume(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	return s.control(ctx, scope, id, func(ctx context.Context, tx *store.Tx, r record.Runner) error {
		if err := resumable(r); err != nil {
			return err
		}
		return tx.SetDraining(ctx, r.ID, false)
	})
}

// resumable: a retired runner does not come back.
func resumable(r record.Runner) error {
	if r.RetiredAt != nil {
		return ErrRetired
	}
	return nil
}

// ClearQuarantine lets a quarantined runner take work again and accepts
// what it reports now as its inventory, so the difference that quarantined
// it does not do so again at the next heartbeat.
func (s *Service) ClearQuarantine(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	return s.control(ctx, scope, id, func(ctx context.Context, tx *store.Tx, r record.Runner) error {
		return tx.ClearQuarantine(ctx, r.ID, InventoryOf(r))
	})
}

// ClearGPUHealth returns one of a runner's GPUs to service: the fault the
// server holds against it is dropped, and the runner may be given work for
// it again once its agent reports it healthy. A GPU without a fault is
// refused, changing nothing.
func (s *Service) ClearGPUHealth(ctx context.Context, scope record.Scope, id uuid.UUID, gpuUUID string) (record.Runner, error) {
	return s.control(ctx, scope, id, func(ctx context.Context, tx *store.Tx, r record.Runner) error {
		if _, held := runnerapi.Faulted(r.GPUFaults)[gpuUUID]; !held {
			return record.Invalidf("GPU %q of runner %s has no fault recorded", gpuUUID, r.ID)
		}
		return tx.ClearGPUFault(ctx, r.ID, gpuUUID)
	})
}

// control applies one control to a runner in one transaction: the runner
// is locked inside scope, apply decides on it as locked and has the store
// write what it decided, and the runner is returned as stored afterwards.
// A refusal changes nothing.
func (s *Service) control(ctx context.Context, scope record.Scope, id uuid.UUID, apply func(context.Context, *store.Tx, record.Runner) error) (record.Runner, error) {
	var out record.Runner
	err := audit.Change(ctx, s.st, func(tx *store.Tx) error {
		r, err := tx.LockRunner(ctx, scope, id)
		if err != nil {
			return err
		}
		if err := apply(ctx, tx, r); err != nil {
			return err
		}
		out, err = tx.Runner(ctx, scope, id)
		return err
	})
	return out, err
}
