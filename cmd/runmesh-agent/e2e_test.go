package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// TestIdentityEndToEnd walks a runner's identity with the real programs:
// runmesh-server dev (with its PostgreSQL), runmesh-agent, the runmesh CLI
// and the step CLI. Token → enrol → wrong fingerprint refused → right one
// → whoami over mTLS → step ca renew → the agent renews by itself and picks
// up renewals on disk → step ca renew --daemon → step ca revoke → revoke the
// runner → handshake and renewal refused within a second.
func TestIdentityEndToEnd(t *testing.T) {
	t.Parallel()
	serverBin := e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh-server")
	agentBin := e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh-agent")
	cliBin := e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh")
	step := e2e.Step(t)

	// A one-minute certificate: renewal comes due half a minute in.
	srv := e2e.StartDev(t, serverBin, "--runner-cert-lifetime", "1m")
	envFile, dev := srv.EnvFile, srv.Env
	cli := func(args ...string) (string, error) {
		return e2e.Run(t, nil, cliBin, append([]string{"--env-file", envFile}, args...)...)
	}

	// An enrolment token, into a file only we can read.
	tokenFile := filepath.Join(t.TempDir(), "enrol.token")
	out, err := e2e.Run(t, nil, cliBin, "--env-file", envFile, "create-enrolment-token", "--pool", "default")
	require.NoError(t, err, out)
	token := regexp.MustCompile(`rmet_[A-Za-z0-9_-]+`).FindString(out)
	require.NotEmpty(t, token)
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))

	agentDir := filepath.Join(t.TempDir(), "agent")
	enrol := e2e.Start(t, nil, agentBin, "enrol", "--server", dev["RUNMESH_RUNNER_URL"], "--ca-fingerprint", dev["RUNMESH_CA_FINGERPRINT"],
		"--token-file", tokenFile, "--state-dir", agentDir, "--name", "e2e-runner")
	var runnerID string
	e2e.Eventually(t, 30*time.Second, "the agent enrolled", func() bool {
		m := regexp.MustCompile(`enrolled as runner ([0-9a-f-]{36})`).FindStringSubmatch(enrol.Stdout.String())
		if m != nil {
			runnerID = m[1]
		}
		return m != nil
	})

	// The fingerprint the host shows is step's, and the pinned root is the server's.
	fingerprint := strings.TrimSpace(e2e.MustRun(t, nil, agentBin, "fingerprint", "--state-dir", agentDir))
	require.Equal(t, fingerprint, strings.TrimSpace(e2e.MustRun(t, nil, step, "crypto", "key", "fingerprint", filepath.Join(agentDir, "key.pem"))))
	require.Contains(t, enrol.Stdout.String(), fingerprint)
	require.Equal(t, dev["RUNMESH_CA_FINGERPRINT"], strings.TrimSpace(e2e.MustRun(t, nil, step, "certificate", "fingerprint", filepath.Join(agentDir, "root.pem"))))
	fi, err := os.Stat(filepath.Join(agentDir, "key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A wrong fingerprint is refused; the right one approves.
	out, err = cli("approve-runner", runnerID, "SHA256:"+strings.Repeat("A", 43)+"=")
	require.Error(t, err)
	require.Contains(t, out, "fingerprint does not match")
	out = e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "runners", "--status", "PENDING")
	require.Contains(t, out, runnerID)
	approved := time.Now()
	e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "approve-runner", runnerID, fingerprint)
	require.NoError(t, enrol.Wait(t, 10*time.Second), enrol.Stderr.String())
	t.Logf("approval to certificate on the runner, through two processes: %v", time.Since(approved))
	require.Contains(t, enrol.Stdout.String(), "approved: certificate")
	for _, s := range []string{enrol.Stdout.String(), enrol.Stderr.String(), srv.Stderr.String()} {
		require.NotContains(t, s, token, "the enrolment token is never printed or logged")
	}

	// whoami over mTLS.
	status := agentStatus(t, agentBin, agentDir)
	require.Equal(t, "enrolled", status.Enrolment)
	require.Equal(t, runnerID, status.ServerView.WhoAmI.RunnerID, status.ServerView.Error)
	firstSerial := status.Certificate.Serial

	// The agent daemon: ready once the server accepts it.
	agentNotify := e2e.NewNotify(t)
	agent := e2e.Start(t, []string{agentNotify.Env()}, agentBin, "run", "--state-dir", agentDir)
	agentNotify.WaitFor(t, "READY=1", 30*time.Second)

	// step, pinned by fingerprint, renews the runner's certificate in place;
	// the running agent picks the new file up without a restart.
	stepEnv := []string{"STEPPATH=" + t.TempDir()}
	e2e.MustRun(t, stepEnv, step, "ca", "bootstrap", "--ca-url", dev["RUNMESH_RUNNER_URL"], "--fingerprint", dev["RUNMESH_CA_FINGERPRINT"])
	e2e.MustRun(t, stepEnv, step, "ca", "renew", "--force", filepath.Join(agentDir, "cert.pem"), filepath.Join(agentDir, "key.pem"))
	stepSerial := agentStatus(t, agentBin, agentDir).Certificate.Serial
	require.NotEqual(t, firstSerial, stepSerial)
	e2e.Eventually(t, 15*time.Second, "the agent picked up step's renewal", func() bool {
		return agent.Stderr.HasLog("picked up a certificate renewed on disk")
	})

	// The agent renews by itself at two thirds of the life.
	e2e.Eventually(t, 60*time.Second, "the agent renewed by itself", func() bool { return agent.Stderr.HasLog("certificate renewed") })
	status = agentStatus(t, agentBin, agentDir)
	require.NotEqual(t, stepSerial, status.Certificate.Serial)
	require.Equal(t, runnerID, status.ServerView.WhoAmI.RunnerID, status.ServerView.Error)

	// step's daemon renewing the running agent's files every few seconds,
	// for longer than a certificate lives: the agent presents each new
	// certificate (its kept-alive connections are dropped as the file
	// changes), so its heartbeats never meet an expired one.
	daemonWhileRunning := e2e.Start(t, stepEnv, step, "ca", "renew", "--daemon", "--renew-period", "5s", filepath.Join(agentDir, "cert.pem"), filepath.Join(agentDir, "key.pem"))
	longer := time.Now().Add(75 * time.Second) // the one-minute certificate in use when it began has expired
	for time.Now().Before(longer) {
		time.Sleep(5 * time.Second) // a look every few renewals: that nothing fails is the check
		require.False(t, agent.Stderr.HasLog("heartbeat failed"), "a heartbeat failed while step renewed:\n%s", agent.Stderr.String())
	}
	_ = daemonWhileRunning.Cmd.Process.Kill()
	online := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { online lastHeartbeatAt } }`, map[string]any{"id": runnerID})
	require.Equal(t, true, online["runner"].(map[string]any)["online"], online)
	agent.Stop(t)

	// step's own daemon renews in place too (alone: two renewers of one file
	// would each mostly find the other's work done).
	agentSerial := status.Certificate.Serial
	daemon := e2e.Start(t, stepEnv, step, "ca", "renew", "--daemon", "--renew-period", "3s", filepath.Join(agentDir, "cert.pem"), filepath.Join(agentDir, "key.pem"))
	e2e.Eventually(t, 30*time.Second, "step ca renew --daemon renewed", func() bool {
		return agentStatus(t, agentBin, agentDir).Certificate.Serial != agentSerial
	})
	_ = daemon.Cmd.Process.Kill()
	status = agentStatus(t, agentBin, agentDir)
	require.Equal(t, runnerID, status.ServerView.WhoAmI.RunnerID, status.ServerView.Error)

	// The runner revokes one certificate with step: that serial is done, the
	// runner and its other certificates are not.
	certPath, keyPath := filepath.Join(agentDir, "cert.pem"), filepath.Join(agentDir, "key.pem")
	kept, err := os.ReadFile(certPath)
	require.NoError(t, err)
	e2e.MustRun(t, stepEnv, step, "ca", "renew", "--force", certPath, keyPath)
	e2e.MustRun(t, stepEnv, step, "ca", "revoke", "--cert", certPath, "--key", keyPath, "--reason", "rotation drill")
	status = agentStatus(t, agentBin, agentDir)
	require.Contains(t, status.ServerView.Error, "bad certificate", "the revoked certificate fails the handshake")
	// GraphQL shows the serial revoked and the runner as it was; the
	// revocation is audited, the runner its actor.
	seen := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { status certificate { serial revokedAt revocationReason } } auditLog(first: 5) { nodes { action actorName actorRole detail } } }`,
		map[string]any{"id": runnerID})
	runner := seen["runner"].(map[string]any)
	require.Equal(t, "APPROVED", runner["status"])
	require.NotNil(t, runner["certificate"].(map[string]any)["revokedAt"], runner)
	require.Equal(t, "rotation drill", runner["certificate"].(map[string]any)["revocationReason"])
	entry := seen["auditLog"].(map[string]any)["nodes"].([]any)[0].(map[string]any)
	require.Equal(t, "revokeCertificate", entry["action"], seen["auditLog"])
	require.Contains(t, entry["actorName"], "runner e2e-runner")
	require.Nil(t, entry["actorRole"])
	require.Contains(t, entry["detail"], "rotation drill")
	require.NoError(t, os.WriteFile(certPath, kept, 0o644))
	status = agentStatus(t, agentBin, agentDir)
	require.Equal(t, runnerID, status.ServerView.WhoAmI.RunnerID, status.ServerView.Error)

	// Revoke the runner: its handshakes and renewals fail at once.
	e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "revoke-runner", runnerID, "decommissioned")
	revoked := time.Now()
	status = agentStatus(t, agentBin, agentDir)
	require.Contains(t, status.ServerView.Error, "bad certificate")
	out, err = e2e.Run(t, stepEnv, step, "ca", "renew", "--force", certPath, keyPath)
	require.Error(t, err, out)
	require.Less(t, time.Since(revoked), time.Second, "handshake and renewal refused within a second of the revocation")
	out = e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "runners", "--status", "REVOKED")
	require.Contains(t, out, "decommissioned")
	srv.Stop(t)
}

type statusReport struct {
	Enrolment   string
	Certificate struct{ Serial string }
	ServerView  struct {
		WhoAmI struct {
			RunnerID string `json:"runner_id"`
		}
		Error string
	} `json:"server_view"`
}

func agentStatus(t *testing.T, agentBin, dir string) statusReport {
	t.Helper()
	out := e2e.MustRun(t, nil, agentBin, "status", "--state-dir", dir)
	var s statusReport
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	return s
}
