package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func organisationFromRow(r dbsqlc.Organisation) record.Organisation {
	return record.Organisation{ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt}
}

// CreateOrganisation adds an organisation. A taken name is ErrConflict.
func (s *Querier) CreateOrganisation(ctx context.Context, name string) (record.Organisation, error) {
	row, err := s.q.CreateOrganisation(ctx, s.db, name)
	if err != nil {
		return record.Organisation{}, mapErr(err)
	}
	return organisationFromRow(row), nil
}

// Organisations lists the organisations inside scope.
func (s *Querier) Organisations(ctx context.Context, scope record.Scope) ([]record.Organisation, error) {
	rows, err := s.q.ListOrganisations(ctx, s.db, dbsqlc.ListOrganisationsParams{
		AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope),
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.Organisation, len(rows))
	for i, r := range rows {
		out[i] = organisationFromRow(r)
	}
	return out, nil
}

// OrganisationsByID loads several organisations at once (for dataloaders);
// ids outside scope are absent from the result.
func (s *Querier) OrganisationsByID(ctx context.Context, scope record.Scope, ids []uuid.UUID) (map[uuid.UUID]record.Organisation, error) {
	rows, err := s.q.OrganisationsByIDs(ctx, s.db, dbsqlc.OrganisationsByIDsParams{
		Ids: ids, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope),
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Organisation, len(rows))
	for _, r := range rows {
		out[r.ID] = organisationFromRow(r)
	}
	return out, nil
}

// Organisation is one organisation inside scope, or ErrNotFound.
func (s *Querier) Organisation(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Organisation, error) {
	m, err := s.OrganisationsByID(ctx, scope, []uuid.UUID{id})
	if err != nil {
		return record.Organisation{}, err
	}
	o, ok := m[id]
	if !ok {
		return record.Organisation{}, record.ErrNotFound
	}
	return o, nil
}
