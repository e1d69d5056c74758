package main

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The admin CLI is a GraphQL client and nothing more: everything it does goes
// through the admin API, so it links neither the server's parts nor the
// runner's.
func TestCLIDeps(t *testing.T) {
	t.Parallel()
	deptest.Check(t, []string{"github.com/runmesh/runmesh/cmd/runmesh"}, deptest.Forbidden{
		"github.com/jackc/pgx":                        "the database driver: the CLI reaches data only through GraphQL",
		"github.com/smallstep/certificates":           "the CA: the CLI signs nothing",
		"github.com/99designs/gqlgen/graphql/handler": "the admin API's server: the CLI is its client",
		"github.com/runmesh/runmesh/controlplane":     "the server",
		"github.com/runmesh/runmesh/graph":            "the admin API's resolvers",
		"github.com/runmesh/runmesh/agent":            "the runner agent",
		"github.com/NVIDIA/go-nvml":                   "NVML: nothing the CLI does measures a GPU",
		"github.com/riverqueue/river":                 "a benchmark's peer, not part of any product binary",
	})
}
