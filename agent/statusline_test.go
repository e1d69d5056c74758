package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// healthyAgent is an agent's conditions with every check passed.
func healthyAgent() *agentHealth {
	h := newAgentHealth(health.NewRegistry())
	h.heartbeat.SetHealthy("answered")
	h.runtime.SetHealthy("rootless podman (cgroup v2) in the user's systemd manager")
	h.survivors.SetHealthy("isolated: 0 found, 0 adopted")
	h.certificate.SetHealthy("valid until 2026-08-01T12:00:00Z")
	h.gpu.SetHealthy("8 GPUs healthy")
	h.nvml.SetHealthy("8 GPUs, driver 550.54.15")
	h.renewal.SetHealthy("next due at 2026-07-20T12:00:00Z")
	h.quarantined.SetHealthy("not quarantined")
	return h
}

func TestStatusLineIsTheRegistryInOneLine(t *testing.T) {
	t.Parallel()
	h := healthyAgent()
	require.Equal(t, "serving; 2 jobs; certificate valid until 2026-08-01T12:00:00Z; healthy (9 conditions)",
		statusLine(serving, 2, h.reg.Conditions()))

	h.stop()
	h.heartbeat.SetUnhealthy("Post \"https://cp:8443/v1/heartbeat\": dial tcp: connection refused\nretrying")
	line := statusLine(draining, 1, h.reg.Conditions())
	require.Equal(t, "draining; 1 jobs; certificate valid until 2026-08-01T12:00:00Z; "+
		"unhealthy: heartbeat: Post \"https://cp:8443/v1/heartbeat\": dial tcp: connection refused retrying; "+
		"draining: stopping: no new work; the agent exits once its jobs end (a second signal exits now; the jobs go on)", line)

	// An expired certificate is left to the summary, like any condition
	// that is not healthy.
	h.certificate.SetUnhealthy("expired at 2026-08-01T12:00:00Z")
	line = statusLine(draining, 1, h.reg.Conditions())
	require.NotContains(t, line, "valid until")
	require.Contains(t, line, "; unhealthy: heartbeat: ")
	require.Contains(t, line, "; certificate: expired at 2026-08-01T12:00:00Z; draining: stopping")
	require.False(t, strings.ContainsAny(line, "\r\n"))
}

// Before start-up has found the worker, the line has no job count.
func TestStatusLineWhileStarting(t *testing.T) {
	t.Parallel()
	h := newAgentHealth(health.NewRegistry())
	require.Equal(t, "starting; unhealthy: heartbeat: not checked yet; runtime: not checked yet; survivor_check: not checked yet; "+
		"certificate: not checked yet; gpu: not checked yet; nvml: not checked yet; renewal: not checked yet; quarantined: not checked yet",
		statusLine(starting, -1, h.reg.Conditions()))
}

// The control plane's drain and quarantine are the agent's conditions too.
func TestTheControlPlanesWordIsAConditionToo(t *testing.T) {
	t.Parallel()
	h := healthyAgent()
	h.answered(runnerapi.HeartbeatResponse{Draining: true, Quarantined: true})
	conds := h.reg.Conditions()
	require.NoError(t, health.Err(conds), "neither makes the agent unhealthy")
	d, _ := lookup(conds, condDraining)
	q, _ := lookup(conds, condQuarantined)
	require.Equal(t, []any{false, "the control plane drains this runner: no new work"}, []any{d.OK, d.Text})
	require.False(t, q.OK)
	// A stop drains whatever the control plane says next.
	h.stop()
	h.answered(runnerapi.HeartbeatResponse{})
	d, _ = lookup(h.reg.Conditions(), condDraining)
	require.False(t, d.OK)
	require.Contains(t, d.Text, "stopping")
}

// Without a runtime the agent says why, and opens none.
func TestWithoutARuntimeTheConditionSaysWhy(t *testing.T) {
	t.Parallel()
	for why, p := range map[string]podmanProbe{
		"cannot run jobs: podman not found on PATH": {err: errors.New("podman not found on PATH")},
		"cannot run jobs: podman is not rootless":   {path: "/usr/bin/podman", facts: runtime.PodmanFacts{CgroupVersion: "v2"}},
	} {
		h := newAgentHealth(health.NewRegistry())
		require.Nil(t, openRuntime(context.Background(), Config{}, p, h.runtime))
		c, _ := lookup(h.reg.Conditions(), condRuntime)
		require.False(t, c.OK)
		require.True(t, strings.HasPrefix(c.Text, why), c.Text)
		require.ErrorContains(t, h.reg.Err(), "runtime: "+why)
	}
}
