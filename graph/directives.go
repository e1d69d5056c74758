package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/runmesh/runmesh/controlplane/record"
)

// hasRole lets a field resolve only for callers whose role ranks at least
// role. It is the coarse gate; which organisation a caller may touch is the
// resolver's and the domain packages' business.
func hasRole(ctx context.Context, _ any, next graphql.Resolver, role record.Role) (any, error) {
	a, ok := principal(ctx)
	if !ok || a.Role.Rank() < role.Rank() {
		return nil, errForbidden
	}
	return next(ctx)
}
