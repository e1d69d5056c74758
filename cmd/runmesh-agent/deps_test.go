package main

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The runner binary links nothing of the server. A runner host holds no
// database credentials and no CA key, and a binary that could speak SQL or
// sign certificates is one exploit away from doing so.
func TestAgentDeps(t *testing.T) {
	t.Parallel()
	deptest.Check(t, []string{"github.com/runmesh/runmesh/cmd/runmesh-agent", "github.com/runmesh/runmesh/agent/..."}, deptest.Forbidden{
		"github.com/jackc/pgx":                    "the database driver: only the control plane speaks to PostgreSQL",
		"github.com/99designs/gqlgen":             "the admin API's server: runners use the runner API, never GraphQL",
		"github.com/vektah/gqlparser":             "the admin API's parser: runners use the runner API, never GraphQL",
		"github.com/smallstep/certificates":       "the CA: a runner holds a key and a certificate, it signs nothing",
		"github.com/riverqueue/river":             "a benchmark's peer, not part of any product binary",
		"github.com/runmesh/runmesh/controlplane": "the server: the agent and the server share only runnerapi and pki",
		"github.com/runmesh/runmesh/graph":        "the admin API",
		"github.com/runmesh/runmesh/pki/ca":       "the embedded CA",
	})
}
