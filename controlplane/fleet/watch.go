package fleet

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// PoolWatch tells which runners of a pool may have changed, written by any
// replica.
type PoolWatch struct {
	sub  *store.Subscription
	pool string
}

// WatchPool starts watching a pool's runners. Start before reading what
// you wait on, or a change between the read and the start is missed. Close
// it when done.
func (s *Service) WatchPool(poolID uuid.UUID) *PoolWatch {
	return &PoolWatch{sub: s.listener.Subscribe(store.ChannelRunnerStatus), pool: store.PoolChanged + poolID.String()}
}

// Next waits for a runner that may have changed and returns its id (of any
// pool: runner ids say nothing of theirs), or nil when every runner of the
// pool must be read again: changes may have gone unheard (the listener
// reconnected), or the pool itself changed (its lease is every runner's).
// It returns ctx's error if ctx ends first.
func (w *PoolWatch) Next(ctx context.Context) (*uuid.UUID, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case p := <-w.sub.C:
			if p == "" || p == w.pool {
				return nil, nil
			}
			// Other pools' payloads are not about this pool's runners.
			if id, err := uuid.Parse(p); err == nil {
				return &id, nil
			}
		}
	}
}

// Close stops the watch.
func (w *PoolWatch) Close() { w.sub.Close() }
