package main_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// mockGPU is the UUID go-nvml's mock gives GPU i in the nvmlmock build.
func mockGPU(i int) string { return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i) }

// cdiSpec declares the mock GPUs to podman as CDI devices, each setting
// RUNMESH_TEST_GPU_i in the container, so a job shows which GPUs it got.
func cdiSpec(n int) string {
	var b strings.Builder
	b.WriteString("cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n")
	for i := range n {
		fmt.Fprintf(&b, "- name: %s\n  containerEdits:\n    env: [RUNMESH_TEST_GPU_%d=%s]\n", mockGPU(i), i, mockGPU(i))
	}
	return b.String()
}

// TestGPUsInTheSandbox runs the agent built with go-nvml's DGX A100 mock (8
// GPUs) as the packaged unit in the sandbox, its GPUs declared to podman
// through CDI: a 2-GPU job gets exactly two GPUs, and the agent's /metrics
// name the job on exactly those two while it runs, and on none after; an
// XID 79 on the first GPU is kept by the server across an agent restart, the
// seven others keep taking work, and clearGpuHealth returns it.
func TestGPUsInTheSandbox(t *testing.T) {
	sb, serverBin, cliBin, agentBin := sandboxTest(t, "runmesh-agent-nvmlmock")

	srv := e2e.StartDev(t, serverBin)
	poolID := srv.GraphQL(t, `{ pools { id } }`, nil)["pools"].([]any)[0].(map[string]any)["id"]
	srv.GraphQL(t, `mutation($id: ID!) { updatePool(input: {id: $id, leaseSeconds: 6}) { id } }`, map[string]any{"id": poolID})
	sb.must("exec", "sh", "-c", "mkdir -p /etc/cdi && cat > /etc/cdi/runmesh-test.yaml <<'EOF'\n"+cdiSpec(8)+"EOF")
	t.Cleanup(func() { sb.run("exec", "rm", "-f", "/etc/cdi/runmesh-test.yaml") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := ln.Addr().String()
	ln.Close()
	runnerID := sb.installAgent(t, srv, cliBin, agentBin, "dgx-sandbox", "metrics:\n  listen: "+metricsAddr+"\n")
	sb.must("exec", "systemctl", "start", "runmesh-agent")

	submit := func(gpus int) string {
		t.Helper()
		in := map[string]any{"poolId": poolID, "image": "localhost/busybox:latest",
			"command": []string{"sh", "-c", "env | grep ^RUNMESH_TEST_GPU_ | sort; sleep 4"},
			"claim":   map[string]any{"cores": 0.5, "gpus": gpus, "wallClockSeconds": 60}}
		return srv.GraphQL(t, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": in})["submitJob"].(map[string]any)["id"].(string)
	}
	job := func(id string) map[string]any {
		return srv.GraphQL(t, `query($id: ID!) { job(id: $id) { state stateReason logs organisation { name } pool { name } } }`,
			map[string]any{"id": id})["job"].(map[string]any)
	}
	waitState := func(id string, within time.Duration, state string) map[string]any {
		t.Helper()
		var j map[string]any
		e2e.Eventually(t, within, "job "+id+" "+state, func() bool { j = job(id); return j["state"] == state })
		return j
	}
	// gotGPUs are the GPUs a job's container was given, from its output.
	gotGPUs := func(logs any) []string {
		var out []string
		for _, m := range regexp.MustCompile(`RUNMESH_TEST_GPU_\d+=(\S+)`).FindAllStringSubmatch(logs.(string), -1) {
			out = append(out, m[1])
		}
		sort.Strings(out)
		return out
	}
	// labelled are the GPUs whose memory series names the job.
	labelled := func(jobID string) []string {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out []string
		for _, m := range regexp.MustCompile(`DCGM_FI_DEV_FB_USED\{[^}]*UUID="([^"]+)"[^}]*job="`+jobID+`"[^}]*\}`).FindAllStringSubmatch(string(body), -1) {
			out = append(out, m[1])
		}
		sort.Strings(out)
		return out
	}

	t.Run("a 2-GPU job: the metrics of exactly its GPUs name it while it runs", func(t *testing.T) {
		id := submit(2)
		j := waitState(id, 60*time.Second, "RUNNING")
		var during []string
		e2e.Eventually(t, 10*time.Second, "the job's GPUs labelled", func() bool { during = labelled(id); return len(during) > 0 })
		require.Len(t, during, 2)
		org := ""
		if o, ok := j["organisation"].(map[string]any); ok {
			org = o["name"].(string)
		}
		series := regexp.MustCompile(`DCGM_FI_DEV_FB_USED\{[^}]*UUID="` + during[0] + `"[^}]*\}`)
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		line := series.FindString(string(body))
		require.Contains(t, line, fmt.Sprintf(`job="%s",lease="%s/1",`, id, id))
		require.Contains(t, line, fmt.Sprintf(`organisation="%s",pool="%s"`, org, j["pool"].(map[string]any)["name"]))

		j = waitState(id, 60*time.Second, "SUCCEEDED")
		require.Equal(t, during, gotGPUs(j["logs"]), "the labelled GPUs are the ones the container got")
		e2e.Eventually(t, 10*time.Second, "labels gone with the job", func() bool { return len(labelled(id)) == 0 })
	})

	t.Run("XID 79: the GPU stays out across a restart until cleared; the other seven work", func(t *testing.T) {
		gpus := func() []any {
			return srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { gpus { uuid healthy health fault { xid recordedAt } } recovery { agentInstance } } }`,
				map[string]any{"id": runnerID})["runner"].(map[string]any)["gpus"].([]any)
		}
		dropIn := "/etc/systemd/system/runmesh-agent.service.d/xid.conf"
		sb.must("exec", "sh", "-c", "mkdir -p "+filepath.Dir(dropIn)+" && printf '[Service]\\nEnvironment=RUNMESH_TEST_XID=0:79\\n' > "+dropIn+
			" && systemctl daemon-reload && systemctl restart runmesh-agent")
		t.Cleanup(func() { sb.run("exec", "sh", "-c", "rm -f "+dropIn+" && systemctl daemon-reload") })
		e2e.Eventually(t, 30*time.Second, "the fault recorded", func() bool {
			f, _ := gpus()[0].(map[string]any)["fault"].(map[string]any)
			return f != nil && f["recordedAt"] != nil
		})

		// A restart that sees no event: the server's word keeps GPU 0 out
		// (the first the agent would otherwise give a job).
		sb.must("exec", "sh", "-c", "rm -f "+dropIn+" && systemctl daemon-reload && systemctl kill -s KILL runmesh-agent; "+
			"systemctl reset-failed runmesh-agent; systemctl restart runmesh-agent")
		out, _ := sb.run("exec", "systemctl", "show", "-p", "Environment", "runmesh-agent")
		require.NotContains(t, out, "RUNMESH_TEST_XID", "the restarted agent raises no XID itself")
		all := gpus()
		for i, g := range all {
			g := g.(map[string]any)
			if i == 0 {
				require.Equal(t, false, g["healthy"])
				require.EqualValues(t, 79, g["fault"].(map[string]any)["xid"])
				require.Regexp(t, `^XID 79 at \S+ \(ECC: 0 uncorrected, 2 corrected\)$`, g["health"])
				continue
			}
			require.Equal(t, true, g["healthy"], "GPU %d", i)
		}

		eight := submit(8)
		seven := submit(7)
		j := waitState(seven, 60*time.Second, "SUCCEEDED")
		var want []string
		for i := 1; i < 8; i++ {
			want = append(want, mockGPU(i))
		}
		require.Equal(t, want, gotGPUs(j["logs"]), "seven GPUs, never the faulted one")
		require.Contains(t, []any{"QUEUED", "BLOCKED"}, job(eight)["state"], "eight GPUs are not placeable")

		srv.GraphQL(t, `mutation($id: ID!, $u: String!) { clearGpuHealth(runnerId: $id, gpuUuid: $u) { id } }`,
			map[string]any{"id": runnerID, "u": mockGPU(0)})
		j = waitState(eight, 60*time.Second, "SUCCEEDED")
		require.Len(t, gotGPUs(j["logs"]), 8)
	})
}
