package fleet_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/runnerapi"
)

// The detected labels of an agent that reported the facts as found are
// kept as values a selector can name; declared labels are kept as
// declared, and the report passed in is not changed.
func TestReportKeepsDetectedLabelsNameable(t *testing.T) {
	t.Parallel()
	labels := []runnerapi.Label{
		{Key: "runmesh.io/gpu.model", Value: "NVIDIA H200", Source: runnerapi.LabelDetected},
		{Key: "runmesh.io/gpu.driver", Value: "550.54.15", Source: runnerapi.LabelDetected},
		{Key: "team", Value: "ml_infra", Source: runnerapi.LabelDeclared},
	}
	c := runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 4, MemoryMiB: 4096}, Labels: labels}
	rep, err := fleet.Report(c)
	require.NoError(t, err)
	var stored runnerapi.Capacity
	require.NoError(t, json.Unmarshal(rep.Capacity, &stored))
	require.Equal(t, []runnerapi.Label{
		{Key: "runmesh.io/gpu.model", Value: "NVIDIA-H200", Source: runnerapi.LabelDetected},
		{Key: "runmesh.io/gpu.driver", Value: "550.54.15", Source: runnerapi.LabelDetected},
		{Key: "team", Value: "ml_infra", Source: runnerapi.LabelDeclared},
	}, stored.Labels)
	require.Equal(t, "NVIDIA H200", labels[0].Value, "the caller's report is its own")
}
