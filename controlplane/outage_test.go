package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/internal/pgcluster"
	"github.com/runmesh/runmesh/runnerapi"
)

// ownPostgres is a PostgreSQL server of the test's own, to stop and start
// again, and a migrated pool on it.
func ownPostgres(t *testing.T) (*pgcluster.Cluster, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c := controlplanetest.OwnPostgres(t)
	pool, err := controlplane.Connect(ctx, c.URL("runmesh"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = controlplane.Migrate(ctx, pool)
	require.NoError(t, err)
	return c, pool
}

// PostgreSQL down for longer than the lease, while the runner kept
// heartbeating (and was answered "retry"): once it is back, the lease is
// still the runner's, at the same attempt, and no try was charged.
func TestADatabaseOutageLongerThanTheLeaseCostsNoWork(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("stops PostgreSQL for 8 s")
	}
	pg, pool := ownPostgres(t)
	b := setupOn(t, pool, func(o *controlplane.Options) { o.SweepInterval = 100 * time.Millisecond })
	b.leaseSeconds(t, 5)
	jobID, c, l := b.leasedJob(t)
	held := runnerapi.HeartbeatRequest{Capacity: measured(0), Leases: []runnerapi.HeldLease{{LeaseID: l.LeaseID, Attempt: l.Attempt, Phase: "RUNNING"}}}
	require.Equal(t, http.StatusOK, b.beat(t, c, held).Status)

	require.NoError(t, pg.Halt())
	down := time.Now()
	for time.Since(down) < 8*time.Second { // the lease is 5 s
		r := b.beat(t, c, held)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Body)
		require.Equal(t, runnerapi.CodeRetry, r.Code)
		time.Sleep(time.Second) // the runner's pace; the point is that nothing expires meanwhile
	}
	// Every request that needs the database is one retryable answer: 503,
	// a stable code, Retry-After, on both listeners.
	body, _ := json.Marshal(anyWork(0))
	r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Body)
	require.Equal(t, runnerapi.CodeRetry, r.Code)
	r = b.result(t, c, l, runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(0)})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Body)
	require.Equal(t, runnerapi.CodeRetry, r.Code)
	forged, _ := tokens.Admin.New() // well-formed: only the database can refuse it
	for _, token := range []string{b.platform, forged} {
		status, retryAfter, code := b.graphqlStatus(t, token, `{ viewer { role } }`)
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, "1", retryAfter)
		require.Equal(t, "UNAVAILABLE", code)
	}
	require.NoError(t, pg.Restart(context.Background()))

	// The server reaches its database again, and its lease rescuer runs
	// (every 100 ms) before the runner's next heartbeat comes, as it would
	// for a runner that heartbeats every few seconds.
	require.Eventually(t, func() bool {
		_, code := b.gql(t, b.platform, `{ viewer { role } }`, nil)
		return code == ""
	}, 20*time.Second, 50*time.Millisecond)
	time.Sleep(time.Second) // ten passes of the rescuer, which must expire nothing

	r = b.beat(t, c, held)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, runnerapi.LeaseContinue, "the lease is still the runner's")
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state attempt events { nodes { type } } } }`, map[string]any{"id": jobID})
	require.Empty(t, code)
	job := data["job"].(map[string]any)
	require.Equal(t, "RUNNING", job["state"])
	require.EqualValues(t, 1, job["attempt"])
	for _, e := range job["events"].(map[string]any)["nodes"].([]any) {
		require.NotEqual(t, "LEASE_EXPIRED", e.(map[string]any)["type"])
	}
}

// graphqlStatus posts query and returns the HTTP status, Retry-After and
// the first error's code.
func (b *testBundle) graphqlStatus(t testing.TB, token, query string) (int, string, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest(http.MethodPost, b.adminURL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Errors []struct{ Extensions struct{ Code string } }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotEmpty(t, out.Errors)
	return resp.StatusCode, resp.Header.Get("Retry-After"), out.Errors[0].Extensions.Code
}
