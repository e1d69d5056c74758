package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func poolFromRow(r dbsqlc.Pool) record.Pool {
	return record.Pool{
		ID:                    r.ID,
		OrganisationID:        uuidPtr(r.OrganisationID),
		Name:                  r.Name,
		LeaseSeconds:          intPtr(r.LeaseSeconds),
		QueueTimeoutHours:     intPtr(r.QueueTimeoutHours),
		AllowUnenforcedMemory: r.AllowUnenforcedMemory,
		AllowNetwork:          r.AllowNetwork,
		Images:                nonNil(r.Images),
		CreatedAt:             r.CreatedAt,
	}
}

// CreatePool adds a pool. The caller has checked that the actor may create
// pools in p.OrganisationID; an organisation that does not exist is
// ErrNotFound, a taken name ErrConflict, an out-of-range setting ErrInvalid.
func (s *Querier) CreatePool(ctx context.Context, p record.NewPool) (record.Pool, error) {
	row, err := s.q.CreatePool(ctx, s.db, dbsqlc.CreatePoolParams{
		OrganisationID:        nullUUID(p.OrganisationID),
		Name:                  p.Name,
		LeaseSeconds:          int32Ptr(p.LeaseSeconds),
		QueueTimeoutHours:     int32Ptr(p.QueueTimeoutHours),
		AllowUnenforcedMemory: p.AllowUnenforcedMemory,
		AllowNetwork:          p.AllowNetwork,
		Images:                nonNil(p.Images),
	})
	if err != nil {
		return record.Pool{}, mapErr(err)
	}
	return poolFromRow(row), nil
}

// Pools lists the pools inside scope that match f.
func (s *Querier) Pools(ctx context.Context, scope record.Scope, f record.PoolFilter) ([]record.Pool, error) {
	rows, err := s.q.ListPools(ctx, s.db, dbsqlc.ListPoolsParams{
		AllOrgs:      scope.All(),
		ScopeOrg:     scopeOrg(scope),
		OnlyPlatform: f.OnlyPlatform,
		FilterOrg:    nullUUID(f.OrganisationID),
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return poolsFromRows(rows), nil
}

// PoolsByOrganisation loads the pools of several organisations at once (for
// dataloaders). Callers pass only organisations they were allowed to load.
func (s *Querier) PoolsByOrganisation(ctx context.Context, orgs []uuid.UUID) (map[uuid.UUID][]record.Pool, error) {
	rows, err := s.q.PoolsByOrganisations(ctx, s.db, orgs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID][]record.Pool, len(orgs))
	for _, p := range poolsFromRows(rows) {
		out[*p.OrganisationID] = append(out[*p.OrganisationID], p)
	}
	return out, nil
}

// Pool is one pool inside scope, or ErrNotFound.
func (s *Querier) Pool(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Pool, error) {
	row, err := s.q.GetPool(ctx, s.db, dbsqlc.GetPoolParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Pool{}, mapErr(err)
	}
	return poolFromRow(row), nil
}

// UsablePool is a pool scope may see and submit to: one of its
// organisation's, or one of the platform's; or ErrNotFound. (Pool is one it
// manages.)
func (s *Querier) UsablePool(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Pool, error) {
	row, err := s.q.GetUsablePool(ctx, s.db, dbsqlc.GetUsablePoolParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Pool{}, mapErr(err)
	}
	return poolFromRow(row), nil
}

// LockPool reads the pool (inside scope), locked until the transaction
// ends, for SavePool.
func (s *Tx) LockPool(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Pool, error) {
	row, err := s.q.GetPoolForUpdate(ctx, s.db, dbsqlc.GetPoolForUpdateParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Pool{}, mapErr(err)
	}
	return poolFromRow(row), nil
}

// SavePool writes p's name and settings over the pool that LockPool locked,
// in the same transaction, and returns the pool as stored (a Tx's alone:
// the write replaces every field, and only the lock keeps it from undoing
// a change made since p was read). Once committed, runners
// waiting on the pool wake, and every replica re-reads its runners.
func (s *Tx) SavePool(ctx context.Context, p record.Pool) (record.Pool, error) {
	row, err := s.q.UpdatePool(ctx, s.db, dbsqlc.UpdatePoolParams{
		ID:                    p.ID,
		Name:                  p.Name,
		LeaseSeconds:          int32Ptr(p.LeaseSeconds),
		QueueTimeoutHours:     int32Ptr(p.QueueTimeoutHours),
		AllowUnenforcedMemory: p.AllowUnenforcedMemory,
		AllowNetwork:          p.AllowNetwork,
		Images:                nonNil(p.Images),
	})
	if err != nil {
		return record.Pool{}, mapErr(err)
	}
	// A changed rule may let waiting jobs fit waiting runners.
	s.notifyAfterCommit(ChannelJobs, p.ID.String())
	// Replicas cache runners with their pool's lease: make them re-read.
	s.runnerChanged(ChannelRunnerStatus, PoolChanged+p.ID.String())
	return poolFromRow(row), nil
}

func poolsFromRows(rows []dbsqlc.Pool) []record.Pool {
	out := make([]record.Pool, len(rows))
	for i, r := range rows {
		out[i] = poolFromRow(r)
	}
	return out
}

// PoolsByID loads several pools at once (for dataloaders); ids outside
// scope are absent from the result.
func (s *Querier) PoolsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Pool, error) {
	rows, err := s.q.PoolsByIDs(ctx, s.db, dbsqlc.PoolsByIDsParams{Ids: ids, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Pool, len(rows))
	for _, r := range rows {
		out[r.ID] = poolFromRow(r)
	}
	return out, nil
}

// nonNil is a list as PostgreSQL's NOT NULL array columns take it: an
// empty one for none.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
