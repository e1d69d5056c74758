package deptest

import (
	"reflect"
	"testing"
)

// The matchers must catch what they are for, or every deps test passes.
func TestViolationsMatchesPathsAndWhatIsBelowThem(t *testing.T) {
	t.Parallel()
	forbidden := Forbidden{
		"github.com/jackc/pgx":                    "no SQL",
		"github.com/runmesh/runmesh/graph":        "no GraphQL",
		"github.com/runmesh/runmesh/controlplane": "no server",
	}
	deps := []string{
		"fmt",
		"github.com/jackc/pgx/v5/pgconn",
		"github.com/runmesh/runmesh/graphite",
		"github.com/runmesh/runmesh/graph",
		"github.com/runmesh/runmesh/controlplane/internal/store",
	}
	got := Violations(deps, forbidden)
	want := []Violation{
		{"github.com/jackc/pgx/v5/pgconn", "no SQL"},
		{"github.com/runmesh/runmesh/graph", "no GraphQL"},
		{"github.com/runmesh/runmesh/controlplane/internal/store", "no server"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Violations = %v, want %v", got, want)
	}
}

func TestNotAllowedKeepsOnlyWhatNoPrefixAllows(t *testing.T) {
	t.Parallel()
	got := NotAllowed([]string{"github.com/runmesh/runmesh/pki", "github.com/runmesh/runmesh/pki/ca", "github.com/runmesh/runmesh/pkix", "golang.org/x/crypto"},
		[]string{"github.com/runmesh/runmesh/pki"})
	want := []string{"github.com/runmesh/runmesh/pkix", "golang.org/x/crypto"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NotAllowed = %v, want %v", got, want)
	}
}
