package graph_test

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The domain packages the admin API speaks to. What they link (the store,
// and through it pgx) is theirs to link; everything else graph links is
// checked all the way down.
var domainPackages = []string{
	"github.com/runmesh/runmesh/controlplane/record",
	"github.com/runmesh/runmesh/controlplane/audit",
	"github.com/runmesh/runmesh/controlplane/tenancy",
	"github.com/runmesh/runmesh/controlplane/queue",
	"github.com/runmesh/runmesh/controlplane/fleet",
	"github.com/runmesh/runmesh/controlplane/enrolment",
}

// The admin API reads and writes through the domain packages, never the
// store: the compiler keeps it from importing controlplane/internal/store,
// and this keeps it from reaching the database another way (the driver
// itself, or a package other than a domain one that links it).
func TestGraphSpeaksOnlyToTheDomainPackages(t *testing.T) {
	t.Parallel()
	reached := deptest.LinkedPast(t, "github.com/runmesh/runmesh/graph/...", domainPackages)
	// One error a forbidden entry, naming the first package linked under it.
	seen := map[string]bool{}
	for _, v := range deptest.Violations(reached, deptest.Forbidden{
		"github.com/runmesh/runmesh/controlplane/internal": "the store: graph speaks to the domain packages, never to it",
		"github.com/jackc/pgx":                             "the database driver: graph reaches data only through the domain packages",
	}) {
		if !seen[v.Why] {
			seen[v.Why] = true
			t.Errorf("graph links %s: %s", v.Import, v.Why)
		}
	}
}
