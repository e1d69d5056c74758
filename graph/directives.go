package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/runmesh/runmesh/controlplane/store"
)

// hasRole lets a field resolve only for callers whose role ranks at least
// role. It is the coarse gate; which organisation a caller may touch is the
// resolver's and the store's business.
func hasRole(ctx context.Context, _ any, next graphql.Resolver, role store.Role) (any, error) {
	a, ok := principal(ctx)
	if !ok || a.Role.Rank() < role.Rank() {
		return nil, errForbidden
	}
	return next(ctx)
}
