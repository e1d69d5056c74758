package runtime_test

import (
	"os"
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The runtime is a job's life on this host and nothing else. Which leases
// to run is the worker's; what it needs of the control plane comes through
// Conn, what the host has is measured elsewhere, and the runner's identity
// is none of its business. A runtime that could reach any of these would
// make decisions that belong to them.
func TestRuntimeDeps(t *testing.T) {
	if os.Getenv("RUNMESH_SANDBOX") != "" {
		t.Skip("go list is the Go toolchain's, which agent/sandbox lacks: make test runs this")
	}
	t.Parallel()
	const agent = "github.com/runmesh/runmesh/agent/internal/"
	deptest.Check(t, []string{agent + "runtime"}, deptest.Forbidden{
		agent + "worker":                 "the lease holder: it asks the runtime to run a lease's job, never the other way round",
		agent + "runnerclient":           "the runner API's client, with its requests for work and results: the runtime sends output through Conn only",
		agent + "heartbeat":              "the heartbeat reports the worker's leases and takes the server's answers for them",
		agent + "identity":               "the runner's key and certificate: a job's life needs neither",
		agent + "enrol":                  "enrolment: the runner's identity",
		agent + "renewal":                "certificate renewal: the runner's identity",
		agent + "capacity":               "what the host has is measured there: the runtime is given GPUs by UUID and passes them through CDI",
		agent + "metrics":                "the agent's metrics are served from what the worker and capacity know",
		"github.com/NVIDIA/go-nvml":      "NVML is capacity's",
		"github.com/runmesh/runmesh/pki": "certificates are the runner's identity's",
	})
}
