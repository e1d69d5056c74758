package graph_test

import (
	"os/exec"
	"strings"
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
	reached := linkedPastTheDomain(t, "github.com/runmesh/runmesh/graph/...")
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

// linkedPastTheDomain is what the packages of pattern link, following
// imports through every package but the domain ones (which are listed but
// not followed).
func linkedPastTheDomain(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, out)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	roots, err := exec.Command("go", "list", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, roots)
	}
	domain := map[string]bool{}
	for _, p := range domainPackages {
		if _, ok := imports[p]; !ok {
			t.Fatalf("graph does not link %s: the list of domain packages is stale", p)
		}
		domain[p] = true
	}
	seen := map[string]bool{}
	todo := strings.Fields(string(roots))
	var reached []string
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		reached = append(reached, p)
		if !domain[p] {
			todo = append(todo, imports[p]...)
		}
	}
	if len(reached) < len(domainPackages) {
		t.Fatalf("go list %s reached %d packages: the check would pass vacuously", pattern, len(reached))
	}
	return reached
}
