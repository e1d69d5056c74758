package runnerapi_test

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// runnerapi is the wire contract both binaries link. Anything it imports is
// linked by both, so it imports only the standard library and pki.
func TestRunnerAPIImportsOnlyTheStandardLibraryAndPKI(t *testing.T) {
	t.Parallel()
	deptest.StdlibOnly(t, []string{"github.com/runmesh/runmesh/runnerapi"},
		"github.com/runmesh/runmesh/runnerapi", "github.com/runmesh/runmesh/pki")
}
