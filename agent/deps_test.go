package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are packages the runner must never link: the server's database
// driver, GraphQL stack and store. A runner host holds no database
// credentials, and a runner binary that could speak SQL is one exploit away
// from doing so.
var forbidden = []string{
	"github.com/jackc/pgx",
	"github.com/99designs/gqlgen",
	"github.com/vektah/gqlparser",
	"github.com/runmesh/runmesh/controlplane/store",
	"github.com/runmesh/runmesh/graph",
	// The CA signs; a runner only holds a key and a certificate.
	"github.com/smallstep/certificates",
	"github.com/runmesh/runmesh/pki/ca",
}

// agentPackages are the roots whose dependencies are checked.
var agentPackages = []string{"github.com/runmesh/runmesh/agent/...", "github.com/runmesh/runmesh/cmd/runmesh-agent"}

func TestAgentDoesNotImportServerPackages(t *testing.T) {
	t.Parallel()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, agentPackages...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list printed no packages: the check would pass vacuously")
	}
	if bad := violations(deps); len(bad) > 0 {
		t.Fatalf("the agent depends on server-only packages: %v", bad)
	}
}

// The matcher itself must catch what it is for.
func TestViolationsCatchesForbiddenImports(t *testing.T) {
	t.Parallel()
	got := violations([]string{"fmt", "github.com/jackc/pgx/v5/pgconn", "github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc", "github.com/runmesh/runmesh/graphite"})
	want := []string{"github.com/jackc/pgx/v5/pgconn", "github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("violations = %v, want %v", got, want)
	}
}

func violations(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}
