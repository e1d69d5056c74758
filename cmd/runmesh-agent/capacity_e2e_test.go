package main_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// TestCapacityEndToEnd runs the real server and an agent whose NVML is
// go-nvml's DGX A100 mock (built with -tags nvmlmock; the shipped agent
// never contains it): the approved agent shows up online with its GPUs and
// capacity in GraphQL, serves dcgm-named metrics, goes offline when it
// stops, and is quarantined when it comes back with a GPU fewer.
func TestCapacityEndToEnd(t *testing.T) {
	t.Parallel()
	serverBin := e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh-server")
	agentBin := e2e.BinaryWithTags(t, "github.com/runmesh/runmesh/cmd/runmesh-agent", "nvmlmock")
	cliBin := e2e.Binary(t, "github.com/runmesh/runmesh/cmd/runmesh")

	srv := e2e.StartDev(t, serverBin)
	envFile, dev := srv.EnvFile, srv.Env
	// A short lease: heartbeats every 2 s, offline 6 s after the last.
	pools := srv.GraphQL(t, `{ pools { id name } }`, nil)["pools"].([]any)
	poolID := pools[0].(map[string]any)["id"]
	srv.GraphQL(t, `mutation($id: ID!) { updatePool(input: {id: $id, leaseSeconds: 6}) { id } }`, map[string]any{"id": poolID})

	agentDir := filepath.Join(t.TempDir(), "agent")
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("version: 1\nlabels:\n  rack: r12\nmetrics:\n  listen: 127.0.0.1:0\n"), 0o644))
	tokenFile := filepath.Join(t.TempDir(), "token")
	out := e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "create-enrolment-token", "--pool", "default")
	require.NoError(t, os.WriteFile(tokenFile, []byte(regexp.MustCompile(`rmet_\S+`).FindString(out)), 0o600))

	eightGPUs := []string{"RUNMESH_TEST_GPUS=8"}
	enrol := e2e.Start(t, eightGPUs, agentBin, "enrol", "--server", dev["RUNMESH_RUNNER_URL"], "--ca-fingerprint", dev["RUNMESH_CA_FINGERPRINT"],
		"--token-file", tokenFile, "--state-dir", agentDir, "--config", cfg, "--name", "dgx-01")
	var runnerID string
	e2e.Eventually(t, 30*time.Second, "enrolled", func() bool {
		m := regexp.MustCompile(`enrolled as runner ([0-9a-f-]{36})`).FindStringSubmatch(enrol.Stdout.String())
		if m != nil {
			runnerID = m[1]
		}
		return m != nil
	})
	const fields = `{ online takingWork quarantined quarantineReason capacity { cores memoryMiB gpusUnavailable driverVersion }
		gpus { uuid name memoryTotalMiB healthy } labels { key value source } health { name ok } }`
	runner := func() map[string]any {
		return srv.GraphQL(t, `query($id: ID!) { runner(id: $id) `+fields+` }`, map[string]any{"id": runnerID})["runner"].(map[string]any)
	}
	// The administrator sees what is being approved.
	pending := runner()
	require.Len(t, pending["gpus"], 8)
	fp := strings.TrimSpace(e2e.MustRun(t, nil, agentBin, "fingerprint", "--state-dir", agentDir))
	e2e.MustRun(t, nil, cliBin, "--env-file", envFile, "approve-runner", runnerID, fp)
	require.NoError(t, enrol.Wait(t, 10*time.Second))
	require.Equal(t, false, runner()["online"], "approved, but not heard from yet")

	agentNotify := e2e.NewNotify(t)
	agent := e2e.Start(t, append(eightGPUs, agentNotify.Env()), agentBin, "run", "--state-dir", agentDir, "--config", cfg)
	agentNotify.WaitFor(t, "READY=1", 30*time.Second)
	got := runner()
	require.Equal(t, true, got["online"])
	// Work goes only to an agent that can run it: one whose job runtime
	// (rootless podman, the user's systemd manager) is there and whose
	// survivor check came in. Run as root here, it has none.
	runtimeOK := false
	for _, h := range got["health"].([]any) {
		if c := h.(map[string]any); c["name"] == "runtime" {
			runtimeOK = c["ok"].(bool)
		}
	}
	require.Equal(t, runtimeOK, got["takingWork"])
	require.Len(t, got["gpus"], 8)
	gpu0 := got["gpus"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"uuid": "GPU-00000000-0000-4000-8000-000000000000", "name": "Mock NVIDIA A100-SXM4-40GB", "memoryTotalMiB": 40960.0, "healthy": true}, gpu0)
	c := got["capacity"].(map[string]any)
	require.Equal(t, "550.54.15", c["driverVersion"])
	require.Positive(t, c["cores"])
	require.Contains(t, got["labels"], map[string]any{"key": "rack", "value": "r12", "source": "DECLARED"})
	require.Contains(t, got["labels"], map[string]any{"key": "runmesh.io/gpu.count", "value": "8", "source": "DETECTED"})
	require.Contains(t, got["health"], map[string]any{"name": "nvml", "ok": true})
	// The agent runs here as root with no user systemd manager: it says it
	// cannot run jobs rather than pretend.
	require.Contains(t, got["health"], map[string]any{"name": "runtime", "ok": false})

	// The agent's /metrics, under dcgm-exporter's names.
	// Logs reach us through a pipe: they may trail READY=1.
	var addr []string
	e2e.Eventually(t, 10*time.Second, "metrics listener logged", func() bool {
		addr = regexp.MustCompile(`"msg":"metrics listener up","addr":"([^"]+)"`).FindStringSubmatch(agent.Stderr.String())
		return addr != nil
	})
	resp, err := http.Get("http://" + addr[1] + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Regexp(t, `DCGM_FI_DEV_FB_USED\{Hostname="[^"]+",UUID="GPU-00000000-0000-4000-8000-000000000003",gpu="3",job="",lease="",modelName="Mock NVIDIA A100-SXM4-40GB",organisation="",pool=""\} 1024`, string(metrics))
	require.Contains(t, string(metrics), `runmesh_agent_heartbeats_total{result="ok"}`)

	// The server's fleet gauges.
	resp, err = http.Get(dev["RUNMESH_ADMIN_URL"] + "/metrics")
	require.NoError(t, err)
	metrics, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), `runmesh_runners{online="true",status="APPROVED"} 1`)
	require.Contains(t, string(metrics), `runmesh_gpus{health="healthy",status="APPROVED"} 8`)
	require.Contains(t, string(metrics), `runmesh_heartbeat_duration_seconds_count`)

	// Stopped, it goes offline after its lease.
	agent.Stop(t)
	agentNotify.WaitFor(t, "STOPPING=1", 10*time.Second)
	e2e.Eventually(t, 15*time.Second, "offline after the agent stopped", func() bool { return runner()["online"] == false })

	// Back with a GPU fewer: online, and quarantined with the difference.
	agent = e2e.Start(t, []string{"RUNMESH_TEST_GPUS=7"}, agentBin, "run", "--state-dir", agentDir, "--config", cfg)
	e2e.Eventually(t, 15*time.Second, "quarantined after drift", func() bool { return runner()["quarantined"] == true })
	got = runner()
	require.Equal(t, true, got["online"])
	require.Equal(t, false, got["takingWork"])
	require.Equal(t, "inventory drift: GPU GPU-00000000-0000-4000-8000-000000000007 is missing", got["quarantineReason"])
	e2e.Eventually(t, 10*time.Second, "quarantine logged", func() bool { return srv.Stderr.HasLog("runner quarantined") })
	agent.Stop(t)
	srv.Stop(t)
}
