package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// A runner's agent takes work only after its survivor check: the server
// leases to the agent instance whose recovery proof claims the runner
// isolated, and to no other.
func TestNoWorkBeforeTheSurvivorCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id, c, _ := b.approvedRunner(t, measured(8))
	require.NoError(t, b.store.RecordRecovery(ctx, uuid.MustParse(id), nil), "start from a runner that never sent a proof")
	jobID, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)

	refused := func(why string, instance string) {
		t.Helper()
		req := anyWork(0)
		req.AgentInstance = instance
		body, _ := json.Marshal(req)
		r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
		require.Equal(t, http.StatusConflict, r.Status, why)
		require.Equal(t, runnerapi.CodeRecoveryRequired, r.Code, why)
		var state string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, jobID).Scan(&state))
		require.Equal(t, "QUEUED", state, why)
	}
	stored := func() []byte {
		var proof []byte
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT recovery FROM runners WHERE id = $1`, id).Scan(&proof))
		return proof
	}
	refused("no proof at all", testInstance)
	takingWork := func() bool {
		t.Helper()
		data, code := b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { takingWork } }`, map[string]any{"id": id})
		require.Empty(t, code)
		return data["runner"].(map[string]any)["takingWork"].(bool)
	}
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)}).Status)
	require.False(t, takingWork(), "heard from, but without a survivor check")

	// Impossible proofs are refused and change nothing.
	other := uuid.NewString()
	for name, p := range map[string]runnerapi.RecoveryProof{
		"not a UUID":          {AgentInstance: "agent-1", SurvivorsChecked: true, Isolated: true},
		"adopted > found":     {AgentInstance: other, SurvivorsChecked: true, SurvivorsFound: 1, Adopted: 2, Isolated: true},
		"isolated, unchecked": {AgentInstance: other, Isolated: true},
		"negative":            {AgentInstance: other, SurvivorsChecked: true, SurvivorsFound: -1, Isolated: true},
		"control characters":  {AgentInstance: other, BootID: "a\x00b", SurvivorsChecked: true, Isolated: true},
	} {
		r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8), Recovery: &p})
		require.Equal(t, http.StatusBadRequest, r.Status, name)
		require.Nil(t, stored(), name)
	}

	// A check that could not isolate the runner is recorded, and gives no work.
	p := isolated(other)
	p.Isolated = false
	p.SurvivorsFound = 1
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8), Recovery: &p})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `"recovery_recorded":true`)
	refused("not isolated", other)
	require.False(t, takingWork(), "checked, but not isolated")

	// An isolated proof lets its own instance lease, and no other.
	p = isolated(other)
	p.SurvivorsFound, p.Adopted = 2, 1
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8), Recovery: &p}).Status)
	refused("another instance", testInstance)
	refused("no instance", "")
	req := anyWork(0)
	req.AgentInstance = other
	leases := b.lease(t, c, req)
	require.Len(t, leases, 1)
	require.Equal(t, jobID, leases[0].LeaseID)
	require.True(t, takingWork())

	// A heartbeat without a proof keeps the one recorded.
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)}).Status)
	data, code := b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { recovery {
		agentInstance bootId survivorsChecked survivorsFound adopted isolated at } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	got := data["runner"].(map[string]any)["recovery"].(map[string]any)
	require.NotEmpty(t, got["at"])
	delete(got, "at")
	require.Equal(t, map[string]any{"agentInstance": other, "bootId": "test-boot", "survivorsChecked": true,
		"survivorsFound": float64(2), "adopted": float64(1), "isolated": true}, got)
}
