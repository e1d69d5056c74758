package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// TestAGPUFaultOutlastsTheAgentUntilCleared: a GPU an agent reports with an
// XID stays out of placement when the agent, restarted, reports it healthy
// again, the runner's other GPUs keep taking work, and only an
// administrator's clearGpuHealth (audited) puts it back.
func TestAGPUFaultOutlastsTheAgentUntilCleared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(8))
	const bad = "GPU-00000007"
	seen := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

	faulty := measured(8)
	faulty.GPUs[7].Healthy, faulty.GPUs[7].Health = false, "XID 79"
	faulty.GPUs[7].Fault = &runnerapi.GPUFault{UUID: bad, XID: 79, ECCCorrected: 2, ObservedAt: seen}
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: faulty})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var resp runnerapi.HeartbeatResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Len(t, resp.GPUFaults, 1, "the answer names the fault it kept")
	require.Equal(t, 79, resp.GPUFaults[0].XID)
	require.NotNil(t, resp.GPUFaults[0].RecordedAt)

	// The agent restarts and knows nothing: it reports all eight healthy.
	// The server's word stands, and says so in every answer.
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	resp = runnerapi.HeartbeatResponse{}
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Len(t, resp.GPUFaults, 1)
	require.Equal(t, bad, resp.GPUFaults[0].UUID)
	gpu := func() map[string]any {
		data, code := b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { gpus { uuid healthy health
			fault { xid eccUncorrected eccCorrected observedAt recordedAt evidence } } } }`, map[string]any{"id": id})
		require.Empty(t, code)
		return data["runner"].(map[string]any)["gpus"].([]any)[7].(map[string]any)
	}
	g := gpu()
	require.Equal(t, false, g["healthy"])
	fault := g["fault"].(map[string]any)
	require.Equal(t, 79.0, fault["xid"])
	require.Equal(t, 2.0, fault["eccCorrected"])
	require.Equal(t, "2026-12-02T10:00:00Z", fault["observedAt"])
	require.NotNil(t, fault["recordedAt"])
	require.Equal(t, "XID 79 at 2026-12-02T10:00:00Z (ECC: 0 uncorrected, 2 corrected)", g["health"])

	// Seven GPUs place; eight do not.
	needs := func(gpus int) func(map[string]any) {
		return func(in map[string]any) { in["claim"].(map[string]any)["gpus"] = gpus }
	}
	eight, code := b.submit(t, b.platform, jobInput(b.poolA.ID, needs(8)))
	require.Empty(t, code)
	require.Empty(t, b.lease(t, c, anyWork(0)), "the faulted GPU is not placeable")
	_, code = b.submit(t, b.platform, jobInput(b.poolA.ID, needs(7)))
	require.Empty(t, code)
	leases := b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, 7, leases[0].Claim.GPUs)
	require.Equal(t, http.StatusOK, b.result(t, c, leases[0], runnerapi.ResultRequest{Attempt: leases[0].Attempt, ExitCode: intp(0)}).Status)

	// Refusals change nothing: a GPU with no fault, a runner out of scope.
	_, code = b.gql(t, b.platform, `mutation($id: ID!) { clearGpuHealth(runnerId: $id, gpuUuid: "GPU-00000003") { id } }`, map[string]any{"id": id})
	require.Equal(t, "BAD_INPUT", code)
	_, code = b.gql(t, b.adminB, `mutation($id: ID!, $u: String!) { clearGpuHealth(runnerId: $id, gpuUuid: $u) { id } }`, map[string]any{"id": id, "u": bad})
	require.Equal(t, "NOT_FOUND", code)
	require.Equal(t, false, gpu()["healthy"])

	data, code := b.gql(t, b.platform, `mutation($id: ID!, $u: String!) { clearGpuHealth(runnerId: $id, gpuUuid: $u) { gpus { uuid fault { xid } } } }`,
		map[string]any{"id": id, "u": bad})
	require.Empty(t, code)
	require.Nil(t, data["clearGpuHealth"].(map[string]any)["gpus"].([]any)[7].(map[string]any)["fault"])
	var entries int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE action = 'clearGpuHealth' AND outcome = 'OK' AND detail::text LIKE '%' || $1 || '%'`, bad).Scan(&entries))
	require.Equal(t, 1, entries)

	// Reported healthy again, all eight place.
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)})
	require.NotContains(t, r.Body, "gpu_faults")
	require.Equal(t, true, gpu()["healthy"])
	leases = b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, eight, leases[0].LeaseID)
}
