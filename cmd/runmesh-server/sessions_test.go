package main_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// replica is one runmesh-server process of several on one database and CA.
type replica struct {
	*e2e.Proc
	adminURL, runnerURL string
}

// startReplica runs a server process on host (a loopback address of its
// own: replicas on different addresses), sharing dbURL and stateDir's CA.
func startReplica(t *testing.T, dbURL, stateDir, host string) replica {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	urlFile := filepath.Join(t.TempDir(), "db-url")
	require.NoError(t, os.WriteFile(urlFile, []byte(dbURL), 0o600))
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(
		"version: 1\nstate_dir: %s\ndatabase: {url_file: %s}\nadmin: {listen: '%s:0'}\nrunner: {listen: '%s:0', names: ['%s']}\n",
		stateDir, urlFile, host, host, host)), 0o600))
	notify := e2e.NewNotify(t)
	p := e2e.Start(t, []string{notify.Env()}, server(t), "serve", "--config", cfg)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	r := replica{Proc: p}
	e2e.Eventually(t, 10*time.Second, "the replica logged its listeners", func() bool {
		admin := regexp.MustCompile(`"msg":"admin listener up","component":"controlplane","addr":"([^"]+)"`).FindStringSubmatch(p.Stderr.String())
		runner := regexp.MustCompile(`"msg":"runner listener up","component":"controlplane","addr":"([^"]+)"`).FindStringSubmatch(p.Stderr.String())
		if admin == nil || runner == nil {
			return false
		}
		r.adminURL, r.runnerURL = "http://"+admin[1], "https://"+runner[1]
		return true
	})
	return r
}

// TestASessionCrossesReplicas runs two server processes on different
// addresses. The agent's stream stands on the second; a person opens the
// session on the first. The first finds the stream through the database
// and asks the second for it over mutual TLS with its replica
// certificate; bytes cross both ways and none reaches the database. Then
// the second replica is killed mid-session, and the person is told so.
func TestASessionCrossesReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := controlplanetest.NewDatabase(t)
	stateDir := t.TempDir()
	keys, _, err := ca.Init(filepath.Join(stateDir, "ca"), "test")
	require.NoError(t, err)
	first := startReplica(t, dbURL, stateDir, "127.0.0.1")
	second := startReplica(t, dbURL, stateDir, "127.0.0.2")

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	services := controlplanetest.NewServices(t, pool, keys)
	p, err := services.Tenancy.CreatePool(ctx, record.NewPool{Name: "shared"})
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(keys.Root)
	runner := approvedClient(t, services, p.ID, roots, "runner-on-the-second")
	tlsConf := runner.Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConf.ServerName = "127.0.0.2"
	runner.Transport.(*http.Transport).TLSClientConfig = tlsConf

	var jobID uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds, options)
		VALUES ($1, 'busybox', 1, 0, 0, 600, '{"stdio": "TTY"}') RETURNING id`, p.ID).Scan(&jobID))
	big := runnerapi.Resources{Cores: 64, MemoryMiB: 1 << 20}
	var lr runnerapi.LeaseResponse
	require.Equal(t, http.StatusOK, post(t, runner, second.runnerURL+runnerapi.PathLeases, runnerapi.LeaseRequest{
		Kinds: []string{"default"}, Largest: big, Free: big, Max: 1, AgentInstance: agentInstance, Stdio: []runnerapi.Stdio{runnerapi.StdioTTY},
	}, &lr))
	require.Len(t, lr.Leases, 1)
	lease := lr.Leases[0]
	// The job runs: the runner says so in a heartbeat.
	require.Equal(t, http.StatusOK, post(t, runner, second.runnerURL+runnerapi.PathHeartbeat, runnerapi.HeartbeatRequest{
		Capacity: runnerapi.Capacity{Host: runnerapi.HostCapacity{Hostname: "runner-on-the-second", Cores: 64, MemoryMiB: 1 << 20, MemoryAvailableMiB: 1 << 19, DiskFreeMiB: 1 << 20}, GPUs: []runnerapi.GPU{}},
		Leases:   []runnerapi.HeldLease{{LeaseID: lease.LeaseID, Attempt: lease.Attempt, Phase: runnerapi.PhaseRunning}},
	}, nil))
	e2e.Eventually(t, 10*time.Second, "the job to be RUNNING", func() bool {
		var state string
		return pool.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, jobID).Scan(&state) == nil && state == "RUNNING"
	})

	// The agent: its stream stands on the second replica, and it echoes
	// what comes in.
	agentDialer := websocket.Dialer{TLSClientConfig: tlsConf, HandshakeTimeout: 5 * time.Second}
	streamURL := "wss://" + second.runnerURL[len("https://"):] + runnerapi.PathSession(lease.LeaseID) + "?attempt=" + strconv.Itoa(lease.Attempt)
	agent, _, err := agentDialer.Dial(streamURL, nil)
	require.NoError(t, err)
	defer agent.Close()
	opened := make(chan runnerapi.SessionOpen, 1)
	go func() {
		for {
			_, msg, err := agent.ReadMessage()
			if err != nil {
				return
			}
			f, err := runnerapi.ParseFrame(msg)
			if err != nil {
				return
			}
			switch f.Type {
			case runnerapi.FrameOpen:
				var o runnerapi.SessionOpen
				_ = f.Decode(&o)
				opened <- o
			case runnerapi.FrameStdin:
				_ = agent.WriteMessage(websocket.BinaryMessage, runnerapi.AppendFrame(nil, runnerapi.FrameStdout, append([]byte("echo:"), f.Payload...)))
			}
		}
	}()

	// A runner's certificate cannot take a stream as a replica: refused
	// before any upgrade, and the stream still stands.
	lendURL := "wss://" + second.runnerURL[len("https://"):] + relay.LendPath + lease.LeaseID + "/session?attempt=" + strconv.Itoa(lease.Attempt)
	_, resp, err := agentDialer.Dial(lendURL, nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a runner is not a replica")

	// The person, on the first replica.
	token := services.AdminToken(t, "person")
	person, _, err := websocket.DefaultDialer.Dial("ws"+first.adminURL[len("http"):]+runnerapi.PathSessions+jobID.String(), nil)
	require.NoError(t, err)
	defer person.Close()
	hello, _ := json.Marshal(runnerapi.SessionRequest{Token: token, Kind: runnerapi.SessionAttach, Size: runnerapi.Size{Cols: 80, Rows: 24}})
	require.NoError(t, person.WriteMessage(websocket.TextMessage, hello))
	select {
	case o := <-opened:
		require.Equal(t, runnerapi.SessionAttach, o.Kind)
	case <-time.After(15 * time.Second):
		t.Fatalf("the agent on the other replica was never told to open; first replica:\n%s", first.Stderr)
	}
	const secret = "keystrokes-that-stay-out-of-the-database"
	require.NoError(t, person.WriteMessage(websocket.BinaryMessage, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, []byte(secret))))
	_ = person.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, msg, err := person.ReadMessage()
	require.NoError(t, err)
	f, err := runnerapi.ParseFrame(msg)
	require.NoError(t, err)
	require.Equal(t, runnerapi.FrameStdout, f.Type)
	require.Equal(t, "echo:"+secret, string(f.Payload), "the bytes crossed both replicas both ways")

	// The replica holding the agent's stream dies: the person is told.
	require.NoError(t, second.Cmd.Process.Kill())
	_ = person.SetReadDeadline(time.Now().Add(10 * time.Second))
	var end runnerapi.SessionEnd
	for {
		_, msg, err := person.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce, "the session ends with a close, not a broken connection")
			require.Equal(t, runnerapi.SessionEnd{Code: runnerapi.EndServerGone}.CloseCode(), ce.Code)
			break
		}
		if f, err := runnerapi.ParseFrame(msg); err == nil && f.Type == runnerapi.FrameEnd {
			require.NoError(t, f.Decode(&end))
		}
	}
	require.Equal(t, runnerapi.EndServerGone, end.Code, "the person is told the other replica went: %+v", end)

	// Nothing of the session's bytes is in the database: only its record.
	var found bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_logs WHERE job_id = $1)`, jobID).Scan(&found))
	require.False(t, found, "no log chunk for an interactive job")
	var in, out int64
	e2e.Eventually(t, 10*time.Second, "the session's record to be completed", func() bool {
		return pool.QueryRow(ctx, `SELECT bytes_in, bytes_out FROM job_sessions WHERE job_id = $1 AND ended_at IS NOT NULL`, jobID).Scan(&in, &out) == nil
	})
	require.Equal(t, int64(len(secret)), in)
	require.Equal(t, int64(len("echo:"+secret)), out)
}
