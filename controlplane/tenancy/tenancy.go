// Package tenancy is who owns what and who may act: organisations, their
// pools, the admins who act on them with bearer tokens, and the audit log
// of what those admins did. The GraphQL API and the server's commands
// (bootstrap-admin, dev) go through it.
package tenancy

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Service keeps organisations, pools, admins and the audit log.
type Service struct {
	st       *store.Store
	listener *store.Listener
}

// New is tenancy over st; listener tells WatchTokens of revocations made
// on any replica (nil: none are heard).
func New(st *store.Store, listener *store.Listener) *Service {
	return &Service{st: st, listener: listener}
}

// CreateOrganisation adds an organisation; a name that is no handle is a
// *record.InputError, a taken one record.ErrConflict.
func (s *Service) CreateOrganisation(ctx context.Context, name string) (record.Organisation, error) {
	if err := checkHandle("name", name); err != nil {
		return record.Organisation{}, err
	}
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.Organisation, error) { return tx.CreateOrganisation(ctx, name) })
}

// Organisations lists the organisations inside scope.
func (s *Service) Organisations(ctx context.Context, scope record.Scope) ([]record.Organisation, error) {
	return s.st.Organisations(ctx, scope)
}

// OrganisationsByID loads several organisations at once (for
// dataloaders); ids outside scope are absent from the result.
func (s *Service) OrganisationsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Organisation, error) {
	return s.st.OrganisationsByID(ctx, scope, ids)
}

// CreatePool adds a pool. The caller has checked that the actor may create
// pools in p.OrganisationID; an organisation that does not exist is
// record.ErrNotFound, a name or setting out of bounds a
// *record.InputError, a taken name record.ErrConflict.
func (s *Service) CreatePool(ctx context.Context, p record.NewPool) (record.Pool, error) {
	if err := checkNewPool(p); err != nil {
		return record.Pool{}, err
	}
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.Pool, error) { return tx.CreatePool(ctx, p) })
}

// Pool is one pool inside scope, or record.ErrNotFound.
func (s *Service) Pool(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Pool, error) {
	return s.st.Pool(ctx, scope, id)
}

// UsablePool is a pool inside scope or one of the platform's, which every
// organisation may see and submit to; or record.ErrNotFound.
func (s *Service) UsablePool(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Pool, error) {
	return s.st.UsablePool(ctx, scope, id)
}

// Pools lists the pools inside scope that match f.
func (s *Service) Pools(ctx context.Context, scope record.Scope, f record.PoolFilter) ([]record.Pool, error) {
	return s.st.Pools(ctx, scope, f)
}

// PoolsByID loads several pools at once (for dataloaders); ids outside
// scope are absent from the result.
func (s *Service) PoolsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Pool, error) {
	return s.st.PoolsByID(ctx, scope, ids)
}

// PoolsOfOrganisations loads the pools of several organisations at once
// (for dataloaders): every organisation asked for gets an entry, empty
// when it has no pools or is outside scope.
func (s *Service) PoolsOfOrganisations(ctx context.Context, scope record.Scope, orgs []uuid.UUID) (map[uuid.UUID][]record.Pool, error) {
	// Callers pass organisations they loaded through their scope; the scope
	// is checked all the same.
	inScope := make([]uuid.UUID, 0, len(orgs))
	for _, id := range orgs {
		if scope.Includes(id) {
			inScope = append(inScope, id)
		}
	}
	m, err := s.st.PoolsByOrganisation(ctx, inScope)
	if err != nil {
		return nil, err
	}
	for _, id := range orgs {
		if _, ok := m[id]; !ok {
			m[id] = []record.Pool{}
		}
	}
	return m, nil
}
