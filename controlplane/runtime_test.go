package controlplane_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// TestJobOptionsAreCheckedAndReachTheLease: a network only in a pool that
// allows it, a clean absolute working directory, a scratch tmpfs inside
// the memory claim; refusals queue nothing; what is accepted is shown and
// reaches the runner in its lease.
func TestJobOptionsAreCheckedAndReachTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	with := func(kv map[string]any, claim map[string]any) func(map[string]any) {
		return func(in map[string]any) {
			for k, v := range kv {
				in[k] = v
			}
			for k, v := range claim {
				in["claim"].(map[string]any)[k] = v
			}
		}
	}
	before := b.count(t, "SELECT count(*) FROM jobs")
	for name, in := range map[string]map[string]any{
		"a network in a pool that does not allow one": jobInput(b.poolA.ID, with(map[string]any{"network": true}, nil)),
		"a relative working directory":                jobInput(b.poolA.ID, with(map[string]any{"workingDir": "work"}, nil)),
		"a working directory with ..":                 jobInput(b.poolA.ID, with(map[string]any{"workingDir": "/a/../b"}, nil)),
		"scratch beyond the memory claim":             jobInput(b.poolA.ID, with(nil, map[string]any{"memoryMiB": 8, "scratchMiB": 16})),
		"negative scratch":                            jobInput(b.poolA.ID, with(nil, map[string]any{"scratchMiB": -1})),
	} {
		_, code := b.submit(t, b.platform, in)
		require.Equal(t, "BAD_INPUT", code, name)
	}
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"), "refusals queue nothing")

	_, code := b.gql(t, b.platform, `mutation($id: ID!) { updatePool(input: {id: $id, allowNetwork: true, allowUnenforcedMemory: true}) { allowNetwork } }`, map[string]any{"id": b.poolA.ID})
	require.Empty(t, code)
	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, with(map[string]any{"network": true, "workingDir": "/scratch/run"},
		map[string]any{"memoryMiB": 64, "scratchMiB": 16})))
	require.Empty(t, code)
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { network workingDir claim { memoryMiB scratchMiB } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{"network": true, "workingDir": "/scratch/run", "claim": map[string]any{"memoryMiB": 64.0, "scratchMiB": 16.0}}, data["job"])

	_, code = b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	req := anyWork(0)
	req.Max = 2
	leases := b.lease(t, c, req)
	require.Len(t, leases, 2)
	got := map[bool]runnerapi.Lease{}
	for _, l := range leases {
		got[l.LeaseID == id] = l
	}
	require.True(t, got[true].Network)
	require.Equal(t, "/scratch/run", got[true].WorkingDir)
	require.Equal(t, int64(16), got[true].ScratchMiB)
	require.Equal(t, runnerapi.Lease{}.Network, got[false].Network, "a job that asked for nothing has nothing")
	require.Empty(t, got[false].WorkingDir)
	require.Zero(t, got[false].ScratchMiB)
}
