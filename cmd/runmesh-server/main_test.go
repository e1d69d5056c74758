package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/controlplane/store/storetest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds runmesh-server once per test run: these tests drive the
// real program, as a user or systemd would.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "runmesh-server-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "runmesh-server")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// stateDir is a fresh directory the unprivileged PostgreSQL user can reach
// (t.TempDir's directories are 0700, closed to it when we run as root).
func stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o711))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	return filepath.Join(dir, "state")
}

// notifySocket listens where a program run under systemd would send
// sd_notify messages, and hands them over one by one.
func notifySocket(t *testing.T) (path string, msgs <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 32)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				ch <- line
			}
		}
	}()
	return path, ch
}

func waitFor(t *testing.T, msgs <-chan string, want string) {
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			require.True(t, ok, "notify socket closed before %s", want)
			if m == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within 90s", want)
		}
	}
}

type proc struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan error
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary(t), args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		p.done <- err
		require.NoError(t, err, "exit after SIGTERM; stderr:\n%s", p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("did not exit within 30s of SIGTERM")
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "dev.env holds a token")
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		env[k] = v
	}
	return env
}

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
	state := stateDir(t)
	sock, msgs := notifySocket(t)
	env := []string{"NOTIFY_SOCKET=" + sock}

	p := start(t, env, "dev", "--state-dir", state, "--admin-addr", "127.0.0.1:0", "--runner-addr", "127.0.0.1:0")
	waitFor(t, msgs, "READY=1")

	// READY=1 comes only once the listener is bound and the schema is in place.
	dev := readEnv(t, filepath.Join(state, "dev.env"))
	url, token := dev["RUNMESH_ADMIN_URL"], dev["RUNMESH_ADMIN_TOKEN"]
	code, body := get(t, url+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	// Output reaches us through a pipe: it may trail the READY message.
	require.Eventually(t, func() bool { return strings.Contains(p.stdout.String(), url+"/playground") }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, p.stdout.String(), token, "first run prints the token")
	require.NotContains(t, p.stderr.String(), token, "the token never reaches the logs")

	code, body = graphql(t, url, token, `{ viewer { role } }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"data":{"viewer":{"role":"PLATFORM_ADMIN"}}}`, body)
	code, _ = graphql(t, url, "", `{ viewer { role } }`)
	require.Equal(t, http.StatusUnauthorized, code)

	code, body = get(t, url+"/playground")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "/graphql")
	code, body = get(t, url+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "runmesh_build_info")
	require.Contains(t, body, `runmesh_http_request_duration_seconds_count{code="200",listener="admin",route="/graphql"}`)

	p.stop(t)
	waitFor(t, msgs, "STOPPING=1")
	_, err := os.Stat(filepath.Join(state, "postgres", "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "dev stops its PostgreSQL on the way out")

	// A second run keeps the data and does not print the token again.
	p = start(t, env, "dev", "--state-dir", state, "--admin-addr", "127.0.0.1:0", "--runner-addr", "127.0.0.1:0")
	waitFor(t, msgs, "READY=1")
	require.Eventually(t, func() bool { return strings.Contains(p.stdout.String(), "/playground") }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, p.stdout.String(), token)
	dev = readEnv(t, filepath.Join(state, "dev.env"))
	require.Equal(t, token, dev["RUNMESH_ADMIN_TOKEN"])
	code, body = graphql(t, dev["RUNMESH_ADMIN_URL"], token, `{ viewer { name } }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"data":{"viewer":{"name":"dev-admin"}}}`, body)
	p.stop(t)
}

func TestDevRefusesANonLoopbackAddress(t *testing.T) {
	t.Parallel()
	state := stateDir(t)
	out, err := exec.Command(binary(t), "dev", "--state-dir", state, "--admin-addr", "0.0.0.0:0").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "only on loopback")
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
	dbURL := storetest.NewEmptyDatabase(t)
	cfg := writeConfig(t, dbURL)

	out, err := exec.Command(binary(t), "serve", "--config", cfg).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "run `runmesh-server migrate`")

	out, err = exec.Command(binary(t), "migrate", "--config", cfg).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "applied migrations")
	out, err = exec.Command(binary(t), "migrate", "--config", cfg).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "up to date")

	sock, msgs := notifySocket(t)
	p := start(t, []string{"NOTIFY_SOCKET=" + sock}, "serve", "--config", cfg)
	waitFor(t, msgs, "READY=1")
	p.stop(t)
	waitFor(t, msgs, "STOPPING=1")
	require.Contains(t, p.stderr.String(), `"msg":"admin listener up"`, "logs are JSON")

	// A database migrated by a newer runmesh is refused, and left as it is.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	future := store.LatestVersion() + 1
	_, err = conn.Exec(ctx, "INSERT INTO runmesh_schema_migrations (version, name) VALUES ($1, 'future')", future)
	require.NoError(t, err)
	for _, cmd := range []string{"serve", "migrate"} {
		out, err = exec.Command(binary(t), cmd, "--config", cfg).CombinedOutput()
		require.Error(t, err, cmd)
		require.Contains(t, string(out), "newer than this binary knows", cmd)
	}
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT max(version) FROM runmesh_schema_migrations").Scan(&v))
	require.Equal(t, future, v)
}

func TestServeRejectsBadConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "server.yaml")
	require.NoError(t, os.WriteFile(path, []byte("version: 1\ndatabase: {url: x}\nadmin: {listen: '127.0.0.1:0'}\nadmin_token: oops\n"), 0o600))
	out, err := exec.Command(binary(t), "serve", "--config", path).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "field admin_token not found")

	out, err = exec.Command(binary(t), "serve", "--config", filepath.Join(t.TempDir(), "nope.yaml")).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "file not found")
}

// syncBuffer is a bytes.Buffer safe to read while the process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
