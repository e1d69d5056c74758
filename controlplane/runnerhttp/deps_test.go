package runnerhttp_test

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The runner listener only translates: it decodes, authenticates, calls
// one method of a domain package and encodes. What those link (the store,
// and through it pgx; the CA; the object storage) is theirs to link;
// everything else runnerhttp links is checked all the way down.
func TestRunnerHTTPSpeaksOnlyToTheDomainPackages(t *testing.T) {
	t.Parallel()
	reached := deptest.LinkedPast(t, "github.com/runmesh/runmesh/controlplane/runnerhttp", []string{
		"github.com/runmesh/runmesh/controlplane/enrolment",
		"github.com/runmesh/runmesh/controlplane/fleet",
		"github.com/runmesh/runmesh/controlplane/queue",
		"github.com/runmesh/runmesh/controlplane/record",
	})
	seen := map[string]bool{}
	for _, v := range deptest.Violations(reached, deptest.Forbidden{
		"github.com/runmesh/runmesh/controlplane/internal": "the store: a handler that reads or writes rows, or opens a transaction, decides what its domain package should",
		"github.com/jackc/pgx":                             "the database driver: the listener reaches data only through the domain packages",
		"github.com/runmesh/runmesh/controlplane/objects":  "the object storage: presigning and checking outputs are the queue's",
		"github.com/runmesh/runmesh/pki/ca":                "the CA: issuing and renewing are enrolment's",
		"github.com/smallstep":                             "step-ca: its routes come from enrolment",
	}) {
		if !seen[v.Why] {
			seen[v.Why] = true
			t.Errorf("runnerhttp links %s: %s", v.Import, v.Why)
		}
	}
}
