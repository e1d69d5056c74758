package pki_test

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// pki (fingerprints, PEM) is linked by the agent, the server and the CLI's
// tests alike, so it imports only the standard library. The embedded CA
// lives in pki/ca, which only the server links.
func TestPKIImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	deptest.StdlibOnly(t, []string{"github.com/runmesh/runmesh/pki"}, "github.com/runmesh/runmesh/pki")
}
