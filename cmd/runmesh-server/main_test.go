package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/internal/devenv"
)

const serverPkg = "github.com/runmesh/runmesh/cmd/runmesh-server"

func server(t *testing.T) string { return e2e.Binary(t, serverPkg) }

func graphql(t *testing.T, url, token, query string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequest(http.MethodPost, url+"/graphql", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDevEndToEnd(t *testing.T) {
	t.Parallel()
	state := e2e.StateDir(t)
	notify := e2e.NewNotify(t)
	env := []string{notify.Env()}

	p := e2e.Start(t, env, server(t), e2e.DevArgs(state)...)
	notify.WaitFor(t, "READY=1", 90*time.Second)

	// READY=1 comes only once the listeners are bound and the schema is in place.
	envPath := filepath.Join(state, devenv.FileName)
	fi, err := os.Stat(envPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "dev.env holds a token")
	dev := e2e.ReadEnvFile(t, envPath)
	url, token := dev["RUNMESH_ADMIN_URL"], dev["RUNMESH_ADMIN_TOKEN"]
	require.NotEmpty(t, dev["RUNMESH_RUNNER_URL"])
	require.Len(t, dev["RUNMESH_CA_FINGERPRINT"], 64)
	code, body := get(t, url+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	// Output reaches us through a pipe: it may trail the READY message.
	e2e.Eventually(t, 10*time.Second, "banner printed", func() bool { return strings.Contains(p.Stdout.String(), url+"/playground") })
	require.Contains(t, p.Stdout.String(), token, "first run prints the token")
	require.Contains(t, p.Stdout.String(), dev["RUNMESH_CA_FINGERPRINT"])
	require.NotContains(t, p.Stderr.String(), token, "the token never reaches the logs")

	code, body = graphql(t, url, token, `{ viewer { role } certificateAuthority { rootFingerprint } }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, fmt.Sprintf(`{"data":{"viewer":{"role":"PLATFORM_ADMIN"},"certificateAuthority":{"rootFingerprint":%q}}}`, dev["RUNMESH_CA_FINGERPRINT"]), body)
	code, _ = graphql(t, url, "", `{ viewer { role } }`)
	require.Equal(t, http.StatusUnauthorized, code)

	code, body = get(t, url+"/playground")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "/graphql")
	code, body = get(t, url+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "runmesh_build_info")
	require.Contains(t, body, `runmesh_http_request_duration_seconds_count{code="200",listener="admin",route="/graphql"}`)

	p.Stop(t)
	notify.WaitFor(t, "STOPPING=1", 30*time.Second)
	_, err = os.Stat(filepath.Join(state, "postgres", "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "dev stops its PostgreSQL on the way out")

	// A second run keeps the data and the CA, and does not print the token again.
	p = e2e.Start(t, env, server(t), e2e.DevArgs(state)...)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	e2e.Eventually(t, 10*time.Second, "banner printed", func() bool { return strings.Contains(p.Stdout.String(), "/playground") })
	require.NotContains(t, p.Stdout.String(), token)
	again := e2e.ReadEnvFile(t, envPath)
	require.Equal(t, token, again["RUNMESH_ADMIN_TOKEN"])
	require.Equal(t, dev["RUNMESH_CA_FINGERPRINT"], again["RUNMESH_CA_FINGERPRINT"])
	code, body = graphql(t, again["RUNMESH_ADMIN_URL"], token, `{ viewer { name } }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"data":{"viewer":{"name":"dev-admin"}}}`, body)
	p.Stop(t)
}

func TestDevRefusesANonLoopbackAdminAddress(t *testing.T) {
	t.Parallel()
	state := e2e.StateDir(t)
	out, err := e2e.Run(t, nil, server(t), "dev", "--state-dir", state, "--admin-addr", "0.0.0.0:0")
	require.Error(t, err)
	require.Contains(t, out, "only on loopback")
	_, err = os.Stat(state)
	require.ErrorIs(t, err, os.ErrNotExist, "refused before touching anything")
}

func writeConfig(t *testing.T, dbURL string) string {
	t.Helper()
	urlFile := filepath.Join(t.TempDir(), "db-url")
	require.NoError(t, os.WriteFile(urlFile, []byte(dbURL), 0o600))
	path := filepath.Join(t.TempDir(), "server.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(
		"version: 1\nstate_dir: %s\ndatabase:\n  url_file: %s\nadmin:\n  listen: 127.0.0.1:0\nrunner:\n  listen: 127.0.0.1:0\n  names: [localhost]\n",
		t.TempDir(), urlFile)), 0o600))
	return path
}

func TestServeChecksTheSchemaAndMigrateUpgrades(t *testing.T) {
	t.Parallel()
	dbURL := controlplanetest.NewEmptyDatabase(t)
	cfg := writeConfig(t, dbURL)

	out, err := e2e.Run(t, nil, server(t), "serve", "--config", cfg)
	require.Error(t, err)
	require.Contains(t, out, "run `runmesh-server migrate`")

	out = e2e.MustRun(t, nil, server(t), "migrate", "--config", cfg)
	require.Contains(t, out, "applied migrations")
	out = e2e.MustRun(t, nil, server(t), "migrate", "--config", cfg)
	require.Contains(t, out, "up to date")

	notify := e2e.NewNotify(t)
	p := e2e.Start(t, []string{notify.Env()}, server(t), "serve", "--config", cfg)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	p.Stop(t)
	notify.WaitFor(t, "STOPPING=1", 30*time.Second)
	require.True(t, p.Stderr.HasLog("admin listener up"), "logs are JSON")
	require.True(t, p.Stderr.HasLog("created the CA"), "the first start creates the CA")

	// A database migrated by a newer runmesh is refused, and left as it is.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	future := controlplane.SchemaVersion() + 1
	_, err = conn.Exec(ctx, "INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, 'future')", future)
	require.NoError(t, err)
	for _, cmd := range []string{"serve", "migrate"} {
		out, err = e2e.Run(t, nil, server(t), cmd, "--config", cfg)
		require.Error(t, err, cmd)
		require.Contains(t, out, "newer than this binary knows", cmd)
	}
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT max(version) FROM runmesh_schema_migrations").Scan(&v))
	require.Equal(t, future, v)
}

// serve started while its database is down waits for it with backoff,
// saying so in STATUS= (and asking systemd for more start-up time), and
// serves once it answers: no restart loop through an outage.
func TestServeWaitsForItsDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := controlplanetest.OwnPostgres(t)
	cfg := writeConfig(t, pg.URL("runmesh"))
	e2e.MustRun(t, nil, server(t), "migrate", "--config", cfg)
	require.NoError(t, pg.Halt())

	notify := e2e.NewNotify(t)
	p := e2e.Start(t, []string{notify.Env()}, server(t), "serve", "--config", cfg)
	notify.WaitForPrefix(t, "STATUS=waiting for the database (attempt 1)", 60*time.Second)
	notify.WaitForPrefix(t, "EXTEND_TIMEOUT_USEC=", 10*time.Second)
	notify.WaitForPrefix(t, "STATUS=waiting for the database (attempt 3)", 10*time.Second)
	require.True(t, p.Stderr.HasLog("waiting for the database"))

	require.NoError(t, pg.Restart(ctx))
	notify.WaitFor(t, "READY=1", 60*time.Second)
	require.True(t, p.Stderr.HasLog("the database answers"))
	p.Stop(t)
}

func TestServeRejectsBadConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "server.yaml")
	require.NoError(t, os.WriteFile(path, []byte("version: 1\ndatabase: {url: x}\nadmin: {listen: '127.0.0.1:0'}\nadmin_token: oops\n"), 0o600))
	out, err := e2e.Run(t, nil, server(t), "serve", "--config", path)
	require.Error(t, err)
	require.Contains(t, out, "field admin_token not found")

	out, err = e2e.Run(t, nil, server(t), "serve", "--config", filepath.Join(t.TempDir(), "nope.yaml"))
	require.Error(t, err)
	require.Contains(t, out, "file not found")
}

func TestCACommands(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	out, err := e2e.Run(t, nil, server(t), "ca", "fingerprint", "--state-dir", state)
	require.Error(t, err)
	require.Contains(t, out, "no CA")

	fp := strings.TrimSpace(e2e.MustRun(t, nil, server(t), "ca", "init", "--state-dir", state))
	require.Len(t, fp, 64)
	require.Equal(t, fp, strings.TrimSpace(e2e.MustRun(t, nil, server(t), "ca", "fingerprint", "--state-dir", state)))
	// The same string step prints.
	require.Equal(t, fp, strings.TrimSpace(e2e.MustRun(t, nil, e2e.Step(t), "certificate", "fingerprint", filepath.Join(state, "ca", "root.crt"))))
	// A second init keeps the CA, and says so.
	out = e2e.MustRun(t, nil, server(t), "ca", "init", "--state-dir", state)
	require.Contains(t, out, "already exists")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), fp))
	for _, key := range []string{"root.key", "intermediate.key"} {
		fi, err := os.Stat(filepath.Join(state, "ca", key))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), key)
	}
	// A key others can read is refused.
	require.NoError(t, os.Chmod(filepath.Join(state, "ca", "intermediate.key"), 0o644))
	out, err = e2e.Run(t, nil, server(t), "ca", "fingerprint", "--state-dir", state)
	require.Error(t, err)
	require.Contains(t, out, "readable by its owner only")
}

func TestBootstrapAdminOnce(t *testing.T) {
	t.Parallel()
	dbURL := controlplanetest.NewDatabase(t)
	cfg := writeConfig(t, dbURL)
	cmd := exec.Command(server(t), "bootstrap-admin", "--config", cfg, "--name", "ops")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	token := strings.TrimSpace(stdout.String())
	require.Regexp(t, `^rmat_[A-Za-z0-9_-]{43}$`, token, "only the token goes to standard output")
	require.NotContains(t, stderr.String(), token)

	out, err := e2e.Run(t, nil, server(t), "bootstrap-admin", "--config", cfg)
	require.Error(t, err)
	require.Contains(t, out, "admins exist already")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var admins, audits int
	require.NoError(t, conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM admins), (SELECT count(*) FROM audit_log WHERE action = 'bootstrapAdmin')").Scan(&admins, &audits))
	require.Equal(t, 1, admins)
	require.Equal(t, 1, audits)

	// The token works on a running server.
	notify := e2e.NewNotify(t)
	p := e2e.Start(t, []string{notify.Env()}, server(t), "serve", "--config", cfg)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	// The log reaches us through a pipe: it may trail READY=1.
	var addr []string
	e2e.Eventually(t, 10*time.Second, "admin listener logged", func() bool {
		addr = regexp.MustCompile(`"msg":"admin listener up","component":"controlplane","addr":"([^"]+)"`).FindStringSubmatch(p.Stderr.String())
		return addr != nil
	})
	code, body := graphql(t, "http://"+addr[1], token, `{ viewer { name role } }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"data":{"viewer":{"name":"ops","role":"PLATFORM_ADMIN"}}}`, body)
	p.Stop(t)
}
