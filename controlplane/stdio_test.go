package controlplane_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// An interactive job reaches the runner with its mode and idle timeout,
// and only a runner whose agent names its mode: an agent from before
// interactive jobs names none, and keeps getting batch jobs, whose leases
// read on the wire as they did before (no stdio, no idle timeout). A
// request naming a mode that is not an interactive one leases nothing.
// Output sent for an interactive job is refused and not stored.
func TestAnInteractiveJobIsLeasedOnlyToAnAgentThatRunsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	tty, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) {
		in["stdio"], in["idleTimeoutSeconds"], in["priority"] = "TTY", 600, 10
	}))
	require.Empty(t, code)
	batch, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)

	for name, modes := range map[string][]runnerapi.Stdio{
		"LOGS spelled out":    {"LOGS"},
		"a mode that is none": {"tty"},
	} {
		req := anyWork(0)
		req.Stdio = modes
		body, _ := json.Marshal(req)
		r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
		require.Equal(t, http.StatusBadRequest, r.Status, name)
		require.Equal(t, runnerapi.CodeBadRequest, r.Code, name)
	}

	// An older agent's request, as it is on the wire: the batch job, though
	// the interactive one ranks first.
	old := anyWork(0)
	old.Max = 2
	body, _ := json.Marshal(old)
	require.NotContains(t, string(body), "stdio")
	r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.NotContains(t, r.Body, "stdio", "a batch job's lease reads as before")
	require.NotContains(t, r.Body, "idle_timeout")
	var resp runnerapi.LeaseResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Len(t, resp.Leases, 1)
	require.Equal(t, batch, resp.Leases[0].LeaseID)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM jobs WHERE id = '"+tty+"' AND state = 'QUEUED'"), "left in the queue")

	only := anyWork(0)
	only.Stdio = []runnerapi.Stdio{runnerapi.StdioPipe}
	require.Empty(t, b.lease(t, c, only), "an agent that runs another mode")

	both := anyWork(0)
	both.Stdio = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe}
	body, _ = json.Marshal(both)
	r = b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.True(t, strings.Contains(r.Body, `"stdio":"TTY"`) && strings.Contains(r.Body, `"idle_timeout_seconds":600`), r.Body)
	resp = runnerapi.LeaseResponse{}
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Len(t, resp.Leases, 1)
	require.Equal(t, tty, resp.Leases[0].LeaseID)
	require.Equal(t, runnerapi.StdioTTY, resp.Leases[0].Stdio)
	require.Equal(t, 600, resp.Leases[0].IdleTimeoutSeconds)

	// Whatever a runner sends, none of an interactive job's output is
	// stored, past the bound of chunks too; a batch job's is, as before.
	for _, seq := range []int{0, runnerapi.MaxLogChunksPerAttempt} {
		body, _ = json.Marshal(runnerapi.LogUpload{Attempt: resp.Leases[0].Attempt, Seq: seq, Data: []byte("typed at the terminal\n")})
		r = b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(tty), body)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
		require.Equal(t, runnerapi.CodeBadRequest, r.Code)
		require.Contains(t, r.Body, "interactive")
	}
	require.Zero(t, b.count(t, "SELECT count(*) FROM job_logs WHERE job_id = $1", tty))
	body, _ = json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: 0, Data: []byte("hi\n")})
	require.Equal(t, http.StatusNoContent, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(batch), body).Status)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM job_logs WHERE job_id = $1", batch))
}
