package graph

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/vikstrous/dataloadgen"

	"github.com/runmesh/runmesh/controlplane/store"
)

// loaders batch the lookups of one request: a list of N pools costs one
// query for their organisations, not N. They live for one request, so
// nothing is cached across callers with different scopes.
type loaders struct {
	organisation        *dataloadgen.Loader[uuid.UUID, store.Organisation]
	pool                *dataloadgen.Loader[uuid.UUID, store.Pool]
	poolsOfOrganisation *dataloadgen.Loader[uuid.UUID, []store.Pool]
	certificate         *dataloadgen.Loader[uuid.UUID, store.Certificate] // newest, by runner
}

type loadersKey struct{}

func newLoaders(s *store.Store, scope store.Scope) *loaders {
	wait := dataloadgen.WithWait(time.Millisecond)
	return &loaders{
		organisation: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]store.Organisation, error) {
			return s.OrganisationsByID(ctx, scope, ids)
		}, wait),
		pool: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]store.Pool, error) {
			return s.PoolsByID(ctx, scope, ids)
		}, wait),
		// Only runners the caller already loaded through its scope reach
		// the certificate loader.
		certificate: dataloadgen.NewMappedLoader(s.LatestCertificates, wait),
		poolsOfOrganisation: dataloadgen.NewMappedLoader(func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]store.Pool, error) {
			// Only organisations the caller already loaded (through its
			// scope) reach here; the scope check is repeated all the same.
			m, err := s.PoolsByOrganisation(ctx, ids)
			if err != nil {
				return nil, err
			}
			for id := range m {
				if !inScope(scope, id) {
					delete(m, id)
				}
			}
			for _, id := range ids {
				if _, ok := m[id]; !ok {
					m[id] = []store.Pool{}
				}
			}
			return m, nil
		}, wait),
	}
}

func inScope(scope store.Scope, org uuid.UUID) bool {
	if scope.All() {
		return true
	}
	id, ok := scope.Organisation()
	return ok && id == org
}

func loadersFor(ctx context.Context) *loaders {
	return ctx.Value(loadersKey{}).(*loaders)
}
