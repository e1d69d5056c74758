package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
)

// AdvertiseReplica records that replica id is up and its relay is reached
// at relayURL (its runner listener), now.
func (s *Querier) AdvertiseReplica(ctx context.Context, id uuid.UUID, relayURL string) error {
	return mapErr(s.q.AdvertiseReplica(ctx, s.db, dbsqlc.AdvertiseReplicaParams{ID: id, RelayUrl: relayURL}))
}

// PeerReplicas are the relay URLs of the replicas other than self seen
// within fresh, the most recently seen first.
func (s *Querier) PeerReplicas(ctx context.Context, self uuid.UUID, fresh time.Duration) ([]string, error) {
	urls, err := s.q.PeerReplicas(ctx, s.db, dbsqlc.PeerReplicasParams{Self: self, FreshSeconds: fresh.Seconds()})
	return urls, mapErr(err)
}

// ForgetReplica deletes replica id's row (it is stopping).
func (s *Querier) ForgetReplica(ctx context.Context, id uuid.UUID) error {
	return mapErr(s.q.ForgetReplica(ctx, s.db, id))
}

// PruneReplicas deletes the rows of replicas not seen for keep (they
// crashed); it returns how many.
func (s *Querier) PruneReplicas(ctx context.Context, keep time.Duration) (int, error) {
	n, err := s.q.PruneReplicas(ctx, s.db, keep.Seconds())
	return int(n), mapErr(err)
}
