package main

import (
	"testing"

	"github.com/runmesh/runmesh/internal/deptest"
)

// The control plane never links the runner's host-side code: it must build
// and run on a machine with no GPU driver, no systemd user manager and no
// container runtime.
func TestServerDeps(t *testing.T) {
	t.Parallel()
	deptest.Check(t, []string{"github.com/runmesh/runmesh/cmd/runmesh-server"}, deptest.Forbidden{
		"github.com/runmesh/runmesh/agent":      "the runner agent: the server sees runners only through the runner API",
		"github.com/NVIDIA/go-nvml":             "NVML: GPUs are measured on the runner, never on the server",
		"github.com/coreos/go-systemd/v22/dbus": "the runner's job units: the server starts no process of a job",
		"github.com/containers/podman":          "the container runtime: jobs run on runners",
		"github.com/riverqueue/river":           "a benchmark's peer, not part of any product binary",
	})
}
