package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// sandbox drives agent/sandbox: a booted systemd with the runmesh user's
// manager and rootless podman, which `make test-e2e` has brought up.
type sandbox struct {
	t   *testing.T
	dir string
}

func (s sandbox) cmd(mode string, args ...string) *exec.Cmd {
	c := exec.Command("../../agent/sandbox/sandbox.sh", append([]string{mode}, args...)...)
	c.Env = append(os.Environ(), "RUNMESH_SANDBOX_DIR="+s.dir)
	return c
}

// run runs args in the sandbox, as root ("exec") or as runmesh ("user").
func (s sandbox) run(mode string, args ...string) (string, error) {
	out, err := s.cmd(mode, args...).CombinedOutput()
	return string(out), err
}

func (s sandbox) must(mode string, args ...string) string {
	s.t.Helper()
	out, err := s.run(mode, args...)
	require.NoError(s.t, err, "%s %v: %s", mode, args, out)
	return out
}

// jobUnits lists the job units the runmesh user's manager has loaded.
func (s sandbox) jobUnits() string {
	return s.must("user", "systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "runmesh-job-*")
}

// sandboxTest skips a test unless the sandbox is up, and gives it the
// sandbox, the server and CLI binaries, and the agent build named agent
// that make test-e2e put in the sandbox's bin.
func sandboxTest(t *testing.T, agent string) (sb sandbox, serverBin, cliBin, agentBin string) {
	t.Helper()
	dir := os.Getenv("RUNMESH_SANDBOX_DIR")
	if os.Getenv("RUNMESH_SANDBOX_UP") == "" || dir == "" {
		t.Skip("needs the systemd sandbox up (make test-e2e)")
	}
	agentBin = filepath.Join(dir, "bin", agent)
	require.FileExists(t, agentBin, "make test-e2e builds %s there", agent)
	return sandbox{t: t, dir: dir}, e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh-server"),
		e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh"), agentBin
}

// installAgent enrols agentBin inside the sandbox as runner name (config is
// the rest of its agent.yaml), has it approved, and installs it as the
// packaged unit, runmesh-agent.service, not yet started. It returns the
// runner's id; the test's cleanup kills and stops the unit.
func (s sandbox) installAgent(t *testing.T, srv e2e.Dev, cliBin, agentBin, name, config string) string {
	t.Helper()
	// Enrol inside the sandbox, as the runmesh user, with a token file
	// only that user can read.
	work := filepath.Join(s.dir, "e2e")
	require.NoError(t, os.RemoveAll(work))
	require.NoError(t, os.MkdirAll(work, 0o755))
	out := e2e.MustRun(t, nil, cliBin, "--env-file", srv.EnvFile, "create-enrolment-token", "--pool", "default")
	token := filepath.Join(work, "token")
	require.NoError(t, os.WriteFile(token, []byte(regexp.MustCompile(`rmet_\S+`).FindString(out)), 0o600))
	cfg := filepath.Join(work, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("version: 1\npodman: /usr/bin/podman\n"+config), 0o644))
	const state = "/var/lib/runmesh-agent"
	s.must("exec", "sh", "-c", "chown runmesh:runmesh "+token+" && rm -rf "+state+" && install -d -o runmesh -g runmesh -m 0700 "+state)
	enrol := s.cmd("user", agentBin, "enrol", "--server", srv.Env["RUNMESH_RUNNER_URL"], "--ca-fingerprint", srv.Env["RUNMESH_CA_FINGERPRINT"],
		"--token-file", token, "--state-dir", state, "--config", cfg, "--name", name)
	var enrolOut e2e.Buffer
	enrol.Stdout, enrol.Stderr = &enrolOut, &enrolOut
	require.NoError(t, enrol.Start())
	var runnerID string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("enrol:\n%s", enrolOut.String())
		}
	})
	e2e.Eventually(t, 60*time.Second, "enrolled", func() bool {
		m := regexp.MustCompile(`enrolled as runner ([0-9a-f-]{36})`).FindStringSubmatch(enrolOut.String())
		if m != nil {
			runnerID = m[1]
		}
		return m != nil
	})
	fingerprint := strings.TrimSpace(s.must("user", agentBin, "fingerprint", "--state-dir", state))
	srv.GraphQL(t, `mutation($id: ID!, $fp: String!) { approveRunner(id: $id, fingerprint: $fp) { status } }`, map[string]any{"id": runnerID, "fp": fingerprint})
	require.NoError(t, enrol.Wait(), enrolOut.String())

	// The packaged unit, pointed at this build.
	unit, err := os.ReadFile("../../systemd/runmesh-agent.service")
	require.NoError(t, err)
	// The unit's /tmp is private: the binary and its config go where a
	// package puts them.
	unitText := regexp.MustCompile(`(?m)^ExecStart=.*$`).ReplaceAllString(string(unit),
		fmt.Sprintf("ExecStart=/usr/local/bin/runmesh-agent run --state-dir %s --config /etc/runmesh/agent.yaml", state))
	require.NoError(t, os.WriteFile(filepath.Join(work, "runmesh-agent.service"), []byte(unitText), 0o644))
	s.must("exec", "sh", "-c", "install -m 0755 "+agentBin+" /usr/local/bin/runmesh-agent && install -D -m 0644 "+cfg+
		" /etc/runmesh/agent.yaml && cp "+work+"/runmesh-agent.service /etc/systemd/system/ && systemctl daemon-reload")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.run("exec", "journalctl", "-u", "runmesh-agent", "--no-pager", "-n", "150", "-o", "cat")
			t.Logf("agent journal:\n%s", out)
		}
		s.run("exec", "systemctl", "kill", "-s", "KILL", "runmesh-agent")
		s.run("exec", "systemctl", "stop", "runmesh-agent")
	})
	return runnerID
}
