package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/internal/health"
)

func healthz(t *testing.T, adminURL, accept string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, adminURL+"/healthz", nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

const healthyBody = `database: ok: database reachable
listeners: ok: admin and runner listeners serving
ca: ok: CA root and intermediate valid
runner_certificate: ok: runner listener certificate valid
certificates_expiring: ok: certificates not near expiry
`

func TestHealthzListsEveryCondition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, ctype, body := healthz(t, b.adminURL, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "text/plain; charset=utf-8", ctype)
	require.Equal(t, healthyBody, body)

	code, ctype, body = healthz(t, b.adminURL, "text/html;q=0.9, application/json")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "application/json", ctype)
	var got struct {
		Healthy    bool
		Conditions []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.True(t, got.Healthy)
	require.Len(t, got.Conditions, 5)
	require.Equal(t, map[string]any{"name": "database", "ok": true, "severity": "error", "title": "database reachable"}, got.Conditions[0])
	require.NotContains(t, body, b.srv.AdminAddr().String(), "the unauthenticated endpoint shows no texts")

	// The API shows the same conditions, with what the checks found.
	data, code2 := b.gql(t, b.platform, `{ health { name ok severity text } }`, nil)
	require.Empty(t, code2)
	conds := data["health"].([]any)
	require.Len(t, conds, 5)
	require.Equal(t, map[string]any{"name": "database", "ok": true, "severity": "error", "text": "answers"}, conds[0])
	require.Contains(t, conds[1].(map[string]any)["text"], "admin on "+b.srv.AdminAddr().String())
}

// cutOff makes the database refuse connections and ends those open, as an
// outage would; the returned func lets it back.
func cutOff(t *testing.T, db string) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, storetest.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	exec := func(sql string, args ...any) {
		_, err := conn.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec("ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " ALLOW_CONNECTIONS false")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db)
	restore := func() { exec("ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " ALLOW_CONNECTIONS true") }
	t.Cleanup(restore)
	return restore
}

func TestHealthzIsUnavailableWhileTheDatabaseIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.srv.Healthy(ctx))
	restore := cutOff(t, b.pool.Config().ConnConfig.Database)

	code, _, body := healthz(t, b.adminURL, "")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Equal(t, `database: unhealthy: database reachable
listeners: ok: admin and runner listeners serving
ca: ok: CA root and intermediate valid
runner_certificate: ok: runner listener certificate valid
certificates_expiring: ok: certificates not near expiry
`, body)
	code, _, body = healthz(t, b.adminURL, "application/json")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"healthy":false`)
	require.ErrorContains(t, b.srv.Healthy(ctx), "unhealthy: database: ping database")
	require.Regexp(t, `^unhealthy: database: ping database: `, b.srv.Health().Summary(), "what STATUS= shows")
	require.NoError(t, b.srv.Alive(ctx), "the watchdog hears the process is alive while its database is away")

	restore()
	require.Eventually(t, func() bool {
		resp, err := http.Get(b.adminURL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 100*time.Millisecond, "healthy again once the database answers")
	_, _, body = healthz(t, b.adminURL, "")
	require.Equal(t, healthyBody, body)
}

func TestHealthSharesTheRegistryAndFollowsTheListeners(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := health.NewRegistry()
	extra := reg.Register("dev_postgres", "private PostgreSQL running", health.Error)
	srv, err := controlplane.New(controlplane.Options{
		Pool: b.pool, Store: b.store, AdminAddr: "127.0.0.1:0", RunnerAddr: "127.0.0.1:0", CA: b.keys,
		RunnerNames: []string{"127.0.0.1"}, Health: reg, HealthInterval: time.Hour,
	})
	require.NoError(t, err)
	require.Same(t, reg, srv.Health())
	require.Error(t, srv.Healthy(context.Background()), "not serving before Start")
	require.Error(t, srv.Alive(context.Background()), "not alive for the watchdog before it serves")
	require.NoError(t, srv.Start(context.Background()))
	url := "http://" + srv.AdminAddr().String()

	code, _, body := healthz(t, url, "")
	require.Equal(t, http.StatusServiceUnavailable, code, "the caller's own condition counts")
	require.Contains(t, body, "dev_postgres: unhealthy: private PostgreSQL running\n")
	extra.SetHealthy("")
	code, _, body = healthz(t, url, "")
	require.Equal(t, http.StatusOK, code, body)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srv.Stop(ctx))
	// The listeners' goroutines say so as they return, which may trail Stop.
	listeners := func() health.Status {
		for _, c := range reg.Conditions() {
			if c.Name == "listeners" {
				return c
			}
		}
		return health.Status{}
	}
	require.Eventually(t, func() bool { return listeners().Text == "admin listener stopped; runner listener stopped" },
		5*time.Second, 10*time.Millisecond, "%+v", listeners())
	require.False(t, listeners().OK)
	require.False(t, reg.Healthy())
}
