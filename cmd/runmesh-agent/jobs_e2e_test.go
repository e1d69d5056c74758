package main_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
	"github.com/runmesh/runmesh/internal/s3test"
)

// TestJobsInTheSandbox runs the real server on the host and
// the real agent as a systemd service inside the sandbox, and walks a
// runner's life with jobs: a job's exit code and output, a kill -9 of the
// agent mid-job (adopted), an agent down longer than the lease (the job
// runs again, the survivor is stopped), cancellation, the wall clock,
// images that cannot be had, a drain, and the chaos drills: the agent
// frozen (SIGSTOP) and cut off the network past its lease, and 100 kill -9s.
func TestJobsInTheSandbox(t *testing.T) {
	sb, serverBin, cliBin, agentBin := sandboxTest(t, "runmesh-agent")

	// The runner listener is where the cut drill's network namespace can
	// reach it, and so can the rest of the sandbox.
	// The jobs' object storage: a real S3 server on loopback.
	objects := s3test.Start(t, "runmesh-e2e")
	srv := e2e.StartDev(t, serverBin, append([]string{"--runner-addr", cutNetwork(t, sb)}, storageArgs(t, objects)...)...)
	poolID := srv.GraphQL(t, `{ pools { id } }`, nil)["pools"].([]any)[0].(map[string]any)["id"]
	// A short lease: heartbeats every 2 s, and a lost runner's jobs requeue
	// within about 7 s.
	srv.GraphQL(t, `mutation($id: ID!) { updatePool(input: {id: $id, leaseSeconds: 6}) { id } }`, map[string]any{"id": poolID})

	// Registries for pulls through podman's API: one open, one that wants
	// a login this host does not have. The open one holds busybox, and an
	// image too big for a store made nearly full.
	openReg, privateReg := startRegistry(t, "", ""), startRegistry(t, "builder", "s3cret-pass")
	sb.useRegistries(openReg, privateReg)
	sb.must("user", "sh", "-c", `set -e; podman push -q localhost/busybox:latest "$1/runmesh/busybox:1"
		d=$(mktemp -d); head -c 48M /dev/urandom >"$d/blob"; tar -C "$d" -cf "$d/big.tar" blob
		podman import -q "$d/big.tar" localhost/big:1 >/dev/null; podman push -q localhost/big:1 "$1/runmesh/big:1"
		podman rmi -f localhost/big:1 >/dev/null; rm -rf "$d"`, "sh", openReg)

	runnerID := sb.installAgent(t, srv, cliBin, agentBin, "sandbox-01", `metrics:
  listen: "off"
labels:
  zone: sandbox
`)

	recovery := func() map[string]any {
		r := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { recovery { agentInstance survivorsChecked survivorsFound adopted isolated bootId } } }`,
			map[string]any{"id": runnerID})["runner"].(map[string]any)["recovery"]
		if r == nil {
			return nil
		}
		return r.(map[string]any)
	}
	// Type=notify: start returns at READY=1, which comes only after the
	// survivor check is in the server's hands.
	require.Nil(t, recovery())
	sb.must("exec", "systemctl", "start", "runmesh-agent")
	first := recovery()
	require.NotNil(t, first, "READY=1 came before the server had the recovery proof")
	require.Equal(t, true, first["survivorsChecked"])
	require.Equal(t, true, first["isolated"])
	require.Equal(t, float64(0), first["survivorsFound"])
	require.NotEmpty(t, first["bootId"])

	submit := func(image string, command []string, wallClock int, extra map[string]any) string {
		t.Helper()
		in := map[string]any{"poolId": poolID, "image": image, "command": command,
			"claim": map[string]any{"cores": 0.5, "wallClockSeconds": wallClock}}
		for k, v := range extra {
			in[k] = v
		}
		return srv.GraphQL(t, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": in})["submitJob"].(map[string]any)["id"].(string)
	}
	job := func(id string) map[string]any {
		return srv.GraphQL(t, `query($id: ID!) { job(id: $id) { state stateReason attempt logs
			runs { attempt runnerName leasedAt finishedAt exitCode returnReason hostFault peakMemoryMiB imageDigest runnerVersion
				inputs { sha256 size etag } outputs { key sha256 size md5 } } } }`,
			map[string]any{"id": id})["job"].(map[string]any)
	}
	waitState := func(id string, within time.Duration, states ...string) map[string]any {
		t.Helper()
		var j map[string]any
		e2e.Eventually(t, within, "job "+id+" in "+strings.Join(states, " or "), func() bool {
			j = job(id)
			for _, s := range states {
				if j["state"] == s {
					return true
				}
			}
			return false
		})
		return j
	}
	busybox := "localhost/busybox:latest"

	t.Run("a job runs and reports its exit code and output", func(t *testing.T) {
		id := submit(busybox, []string{"sh", "-c", `echo "hello $GREETING"; echo to stderr >&2; exit 3`}, 60,
			map[string]any{"env": []map[string]any{{"name": "GREETING", "value": "from the sandbox"}}})
		j := waitState(id, 60*time.Second, "FAILED")
		require.Equal(t, "exited with code 3", j["stateReason"])
		require.Equal(t, "hello from the sandbox\nto stderr\n", j["logs"])
		runs := j["runs"].([]any)
		require.Len(t, runs, 1)
		run := runs[0].(map[string]any)
		require.Equal(t, "sandbox-01", run["runnerName"])
		require.Equal(t, float64(3), run["exitCode"])
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, run["imageDigest"])
		require.NotEmpty(t, run["runnerVersion"])
		ok := submit(busybox, []string{"echo", "fine"}, 60, nil)
		require.Equal(t, "fine\n", waitState(ok, 60*time.Second, "SUCCEEDED")["logs"])
		e2e.Eventually(t, 30*time.Second, "units forgotten once reported", func() bool { return strings.TrimSpace(sb.jobUnits()) == "" })
	})

	t.Run("runmesh submit-job --wait follows the job and exits with its exit code", func(t *testing.T) {
		out, err := e2e.Run(t, nil, cliBin, "--env-file", srv.EnvFile, "submit-job", "--pool", "default", "--image", busybox,
			"--cores", "0.5", "--wait", "--", "sh", "-c", "echo waited; exit 7")
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		require.Equal(t, 7, exit.ExitCode(), out)
		require.Regexp(t, `(?s)queued in pool default.*SUBMITTED.*LEASED.*FAILED.*exited with code 7`, out)
		ok, err := e2e.Run(t, nil, cliBin, "--env-file", srv.EnvFile, "submit-job", "--pool", "default", "--image", busybox,
			"--cores", "0.5", "--wait", "--", "true")
		require.NoError(t, err, ok)
		require.Contains(t, ok, "SUCCEEDED")
	})

	t.Run("a network only when asked for, a working directory, a bounded scratch tmpfs", func(t *testing.T) {
		setPool := func(on bool) {
			srv.GraphQL(t, `mutation($id: ID!, $on: Boolean!) { updatePool(input: {id: $id, allowNetwork: $on, allowUnenforcedMemory: $on}) { id } }`,
				map[string]any{"id": poolID, "on": on})
		}
		setPool(true)
		defer setPool(false)
		// The interfaces of the container's own network namespace (rootless
		// podman's /sys shows the host's).
		links := []string{"awk", "-F:", `NR > 2 { gsub(/ /, "", $1); printf "%s ", $1 }`, "/proc/net/dev"}
		none := submit(busybox, links, 60, nil)
		netted := submit(busybox, links, 60, map[string]any{"network": true})
		scratch := submit(busybox, []string{"sh", "-c", "pwd; df -m /scratch | awk 'NR==2 {print $2}'; " +
			"dd if=/dev/zero of=/scratch/f bs=1M count=64 2>&1 | grep -o 'No space left on device' | head -1"}, 60,
			map[string]any{"workingDir": "/scratch/run", "claim": map[string]any{"cores": 0.5, "memoryMiB": 64, "scratchMiB": 16, "wallClockSeconds": 60}})
		require.Equal(t, "lo ", waitState(none, 60*time.Second, "SUCCEEDED")["logs"], "no network by default")
		// slirp4netns (podman 4.3 here) gives the container a tap0.
		require.Regexp(t, `^(lo tap0|tap0 lo|lo eth0|eth0 lo) $`, waitState(netted, 60*time.Second, "SUCCEEDED")["logs"])
		require.Equal(t, "/scratch/run\n16\nNo space left on device\n", waitState(scratch, 60*time.Second, "SUCCEEDED")["logs"],
			"the working directory, a 16 MiB /scratch, and nothing written past it")
		// A working directory the image lacks is the job's mistake, and
		// podman's words say so.
		lacking := submit(busybox, []string{"true"}, 60, map[string]any{"workingDir": "/no/such/dir", "maxAttempts": 1})
		j := waitState(lacking, 60*time.Second, "FAILED")
		require.Contains(t, j["stateReason"], `workdir "/no/such/dir" does not exist`)
		require.NotContains(t, j["stateReason"], "host fault")
	})

	t.Run("pool images: pulled before work; one the host cannot have holds back only the jobs naming it", func(t *testing.T) {
		sb.must("user", "podman", "tag", busybox, "localhost/busybox:pinned")
		wrongPin := "localhost/busybox:pinned@sha256:" + strings.Repeat("0", 64)
		images := []string{busybox, "localhost/absent:latest", wrongPin}
		setImages := func(list []string) {
			srv.GraphQL(t, `mutation($id: ID!, $im: [String!]) { updatePool(input: {id: $id, images: $im}) { id } }`,
				map[string]any{"id": poolID, "im": list})
		}
		setImages(images)
		defer setImages([]string{})
		states := func() map[string]map[string]any {
			out := map[string]map[string]any{}
			r := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { images { image state digest error } } }`, map[string]any{"id": runnerID})
			for _, im := range r["runner"].(map[string]any)["images"].([]any) {
				out[im.(map[string]any)["image"].(string)] = im.(map[string]any)
			}
			return out
		}
		// The running agent hears of the list at its next heartbeat.
		e2e.Eventually(t, 30*time.Second, "every pool image tried", func() bool {
			st := states()
			return len(st) == 3 && st[busybox]["state"] == "PULLED" && st["localhost/absent:latest"]["state"] == "FAILED" && st[wrongPin]["state"] == "MISMATCH"
		})
		st := states()
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, st[busybox]["digest"])
		require.Contains(t, st["localhost/absent:latest"]["error"], "could not be pulled on this host")
		require.Contains(t, st[wrongPin]["error"], "the pool pins sha256:0000")

		// A job naming an image the runner cannot have waits (no attempt,
		// no host fault); the others run.
		absent := submit("localhost/absent:latest", []string{"true"}, 60, map[string]any{"maxAttempts": 1})
		pinned := submit("localhost/busybox:pinned", []string{"true"}, 60, nil)
		defer srv.GraphQL(t, `mutation($a: ID!, $b: ID!) { a: cancelJob(id: $a) { id } b: cancelJob(id: $b) { id } }`, map[string]any{"a": absent, "b": pinned})

		// After a restart the images are tried again before any work.
		sb.must("exec", "sh", "-c", "systemctl kill -s KILL runmesh-agent; systemctl reset-failed runmesh-agent; systemctl restart runmesh-agent")
		since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
		ok := submit(busybox, []string{"echo", "ran"}, 60, nil)
		require.Equal(t, "ran\n", waitState(ok, 60*time.Second, "SUCCEEDED")["logs"])
		var journal string
		e2e.Eventually(t, 10*time.Second, "the lease in the agent's journal", func() bool {
			journal = sb.must("exec", "journalctl", "-u", "runmesh-agent", "--since", since, "--no-pager", "-o", "cat")
			return strings.Contains(journal, `"msg":"lease taken"`)
		})
		// This start's lines only.
		journal = journal[strings.LastIndex(journal, "Starting runmesh-agent.service"):]
		ready, taken := strings.Index(journal, `"msg":"pool image ready"`), strings.Index(journal, `"msg":"lease taken"`)
		require.True(t, ready >= 0 && taken > ready, "the pool's images before the first lease:\n%s", journal)
		for _, id := range []string{absent, pinned} {
			j := job(id)
			require.Equal(t, "QUEUED", j["state"], id)
			require.EqualValues(t, 0, j["attempt"], "never leased to a runner that cannot have its image")
		}
	})

	t.Run("kill -9 of the agent mid-job: the job goes on and is adopted", func(t *testing.T) {
		id := submit(busybox, []string{"sh", "-c", "echo before; sleep 8; echo after"}, 120, nil)
		j := waitState(id, 60*time.Second, "RUNNING")
		require.EqualValues(t, 1, j["attempt"])
		sb.must("exec", "systemctl", "kill", "-s", "KILL", "runmesh-agent")
		require.Contains(t, sb.jobUnits(), "runmesh-job-"+id+"-1.service", "the job's unit outlives the agent")
		// Restart=on-failure brings the agent back; it adopts the job.
		j = waitState(id, 90*time.Second, "SUCCEEDED")
		require.EqualValues(t, 1, j["attempt"])
		require.Equal(t, "before\nafter\n", j["logs"], "output is neither lost nor repeated across the restart")
		r := recovery()
		require.NotEqual(t, first["agentInstance"], r["agentInstance"])
		require.Equal(t, float64(1), r["survivorsFound"])
		require.Equal(t, float64(1), r["adopted"])
		require.Equal(t, true, r["isolated"])
	})

	t.Run("an agent down longer than the lease: the job runs again and the survivor is stopped", func(t *testing.T) {
		id := submit(busybox, []string{"sh", "-c", "sleep 12; echo finished"}, 120, nil)
		waitState(id, 60*time.Second, "RUNNING")
		sb.must("exec", "sh", "-c", "systemctl kill -s KILL runmesh-agent && systemctl stop runmesh-agent")
		// The lease runs out; with no runner the job waits in the queue.
		e2e.Eventually(t, 30*time.Second, "lease expired", func() bool {
			j := job(id)
			return j["state"] == "QUEUED"
		})
		require.Contains(t, sb.jobUnits(), "runmesh-job-"+id+"-1.service", "attempt 1 still runs, unknown to the server")
		sb.must("exec", "systemctl", "start", "runmesh-agent")
		r := recovery()
		require.Equal(t, float64(1), r["survivorsFound"])
		require.Equal(t, float64(0), r["adopted"])
		require.Equal(t, true, r["isolated"])
		require.NotContains(t, sb.jobUnits(), "runmesh-job-"+id+"-1.service", "the survivor was stopped before any work was taken")
		j := waitState(id, 90*time.Second, "SUCCEEDED")
		require.EqualValues(t, 2, j["attempt"])
		require.Equal(t, "finished\n", j["logs"])
		// Attempt 1 ended with its lease (the sweeper's doing); attempt 2's
		// result is the only one a runner reported.
		runs := j["runs"].([]any)
		require.Len(t, runs, 2)
		first, second := runs[0].(map[string]any), runs[1].(map[string]any)
		require.EqualValues(t, 1, first["attempt"])
		require.Nil(t, first["exitCode"])
		require.Equal(t, "lease expired", first["returnReason"])
		require.EqualValues(t, 2, second["attempt"])
		require.EqualValues(t, 0, second["exitCode"])
		require.Nil(t, second["returnReason"])
	})

	t.Run("cancelJob stops the unit", func(t *testing.T) {
		id := submit(busybox, []string{"sleep", "300"}, 600, nil)
		waitState(id, 60*time.Second, "RUNNING")
		start := time.Now()
		srv.GraphQL(t, `mutation($id: ID!) { cancelJob(id: $id) { id } }`, map[string]any{"id": id})
		waitState(id, 30*time.Second, "CANCELLED")
		t.Logf("cancelled in %s", time.Since(start).Round(time.Millisecond))
		require.NotContains(t, sb.jobUnits(), id)
		require.NotContains(t, sb.must("user", "podman", "ps", "-a", "--format", "{{.Names}}"), id)
	})

	t.Run("a job over its wall clock is stopped with that reason", func(t *testing.T) {
		id := submit(busybox, []string{"sleep", "300"}, 3, nil)
		j := waitState(id, 60*time.Second, "FAILED")
		require.Equal(t, "stopped at its wall clock of 3 seconds", j["stateReason"])
		require.NotContains(t, sb.jobUnits(), id)
	})

	t.Run("an image that cannot be had is a host fault only when the host is at fault", func(t *testing.T) {
		failures := func() float64 {
			return srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { failuresInARow } }`, map[string]any{"id": runnerID})["runner"].(map[string]any)["failuresInARow"].(float64)
		}
		// localhost/ names an image this host was meant to have built.
		id := submit("localhost/absent:latest", []string{"true"}, 60, map[string]any{"maxAttempts": 1})
		j := waitState(id, 60*time.Second, "FAILED")
		require.Contains(t, j["stateReason"], "host fault: image localhost/absent:latest could not be pulled on this host")
		require.Equal(t, float64(1), failures())
		// A short name that resolves to nothing is the job's own mistake.
		id = submit("no-such-image", []string{"true"}, 60, map[string]any{"maxAttempts": 1})
		j = waitState(id, 60*time.Second, "FAILED")
		require.Contains(t, j["stateReason"], "image no-such-image does not exist")
		require.NotContains(t, j["stateReason"], "host fault")
		require.Equal(t, float64(0), failures(), "a job's fault resets the count")
	})

	t.Run("pulls go through podman's API: progress in the agent's log; each failure's class decides whose fault it is", func(t *testing.T) {
		since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
		pulled := openReg + "/runmesh/busybox:1"
		id := submit(pulled, []string{"echo", "pulled"}, 60, nil)
		j := waitState(id, 60*time.Second, "SUCCEEDED")
		require.Equal(t, "pulled\n", j["logs"])
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, j["runs"].([]any)[0].(map[string]any)["imageDigest"])
		journal := sb.must("exec", "journalctl", "-u", "runmesh-agent", "--since", since, "--no-pager", "-o", "cat")
		require.Regexp(t, `"msg":"pulling the job's image".*"image":"`+regexp.QuoteMeta(pulled)+`".*"progress":"Copying blob`, journal)
		// podman's event said the container died; the unit was read then.
		require.Regexp(t, `"msg":"the job's container died".*"exit_code":0`, journal)

		fails := func(image, reason string, hostFault bool) {
			t.Helper()
			id := submit(image, []string{"true"}, 60, map[string]any{"maxAttempts": 1})
			j := waitState(id, 90*time.Second, "FAILED")
			require.Contains(t, j["stateReason"], reason, image)
			require.Equal(t, hostFault, strings.Contains(j["stateReason"].(string), "host fault"), "%s: %s", image, j["stateReason"])
			t.Logf("%s: %s", image, j["stateReason"])
		}
		ok := func() { // a success in between: three host faults in a row would quarantine the runner
			t.Helper()
			waitState(submit(pulled, []string{"true"}, 60, nil), 60*time.Second, "SUCCEEDED")
		}
		fails("127.0.0.1:1/runmesh/busybox:1", "could not be pulled on this host (registry unreachable)", true)
		fails(openReg+"/runmesh/nope:1", "image "+openReg+"/runmesh/nope:1 does not exist", false)
		fails(privateReg+"/runmesh/busybox:1", "could not be pulled on this host (login refused)", true)
		ok()

		// A store with 16 MiB left, and a 48 MiB layer.
		store := sb.must("exec", "sh", "-c", `echo $(getent passwd runmesh | cut -d: -f6)/.local/share/containers`)
		store = strings.TrimSpace(store)
		sb.must("exec", "sh", "-c", `used=$(df -B1M --output=used "$1" | tail -1); mount -o remount,size=$((used + 16))M "$1"`, "sh", store)
		defer sb.must("exec", "mount", "-o", "remount,size=2G", store)
		fails(openReg+"/runmesh/big:1", "could not be pulled on this host (disk full)", true)
		sb.must("exec", "mount", "-o", "remount,size=2G", store)
		ok()
	})

	t.Run("data: two inputs and an output through presigned URLs, attested; tampered, expired, past the claim, not written", func(t *testing.T) {
		dataSubtests(t, sb, objects, submit, waitState, busybox)
	})

	t.Run("placement by labels: a selector the runner meets runs; one none meets, or a kind none runs, is BLOCKED, saying why", func(t *testing.T) {
		placementSubtests(t, srv, runnerID, submit, waitState, busybox)
	})

	t.Run("SIGTERM drains: running jobs finish, no new work, then the agent exits", func(t *testing.T) {
		id := submit(busybox, []string{"sh", "-c", "sleep 5; echo drained"}, 60, nil)
		waitState(id, 60*time.Second, "RUNNING")
		sb.must("exec", "systemctl", "kill", "-s", "TERM", "runmesh-agent")
		e2e.Eventually(t, 10*time.Second, "the agent says it drains", func() bool {
			return strings.Contains(sb.must("exec", "systemctl", "show", "-p", "StatusText", "runmesh-agent"), "draining")
		})
		later := submit(busybox, []string{"echo", "too late"}, 60, nil)
		require.Equal(t, "drained\n", waitState(id, 60*time.Second, "SUCCEEDED")["logs"])
		e2e.Eventually(t, 30*time.Second, "agent exited", func() bool {
			out, _ := sb.run("exec", "systemctl", "is-active", "runmesh-agent")
			return strings.TrimSpace(out) == "inactive"
		})
		require.Equal(t, "QUEUED", job(later)["state"], "a draining agent takes no work")
		out, _ := sb.run("exec", "systemctl", "show", "-p", "Result", "runmesh-agent")
		require.Equal(t, "Result=success", strings.TrimSpace(out), "a drained agent exits cleanly (no restart)")

		// Back up, it takes the work it left.
		sb.must("exec", "systemctl", "start", "runmesh-agent")
		require.Equal(t, "too late\n", waitState(later, 60*time.Second, "SUCCEEDED")["logs"])
	})

	t.Run("a job container without a unit is removed before any work", func(t *testing.T) {
		sb.must("exec", "sh", "-c", "systemctl kill -s KILL runmesh-agent && systemctl stop runmesh-agent")
		stray := "0b5c3c1e-6f0e-4a51-9d7a-3f1f2f0c9a10"
		sb.must("user", "podman", "run", "-d", "--name", "runmesh-job-"+stray+"-1", "--label", "runmesh.lease="+stray,
			"--label", "runmesh.attempt=1", busybox, "sleep", "300")
		sb.must("exec", "systemctl", "start", "runmesh-agent")
		r := recovery()
		require.Equal(t, float64(1), r["survivorsFound"])
		require.Equal(t, float64(0), r["adopted"])
		require.Equal(t, true, r["isolated"])
		require.NotContains(t, sb.must("user", "podman", "ps", "-a", "--format", "{{.Names}}"), stray)
	})

	t.Run("the agent frozen past its lease (SIGSTOP): the job runs again, once, and the frozen attempt is stopped", func(t *testing.T) {
		id := submit(busybox, []string{"sh", "-c", "sleep 20; echo finished"}, 120, nil)
		waitState(id, 60*time.Second, "RUNNING")
		sb.must("exec", "systemctl", "kill", "-s", "STOP", "runmesh-agent")
		e2e.Eventually(t, 30*time.Second, "the frozen runner's lease taken back", func() bool { return job(id)["state"] == "QUEUED" })
		sb.must("exec", "systemctl", "kill", "-s", "CONT", "runmesh-agent")
		j := waitState(id, 90*time.Second, "SUCCEEDED")
		require.EqualValues(t, 2, j["attempt"])
		require.Equal(t, "finished\n", j["logs"], "the frozen attempt was stopped before its end; the second ran once")
		runs := j["runs"].([]any)
		require.Len(t, runs, 2)
		require.Equal(t, "lease expired", runs[0].(map[string]any)["returnReason"])
		require.EqualValues(t, 0, runs[1].(map[string]any)["exitCode"])
		require.NotContains(t, sb.jobUnits(), "runmesh-job-"+id+"-1.service", "the thawed agent stopped the attempt it no longer held")
	})

	t.Run("the agent cut off the network past its lease (a network namespace): each job runs again, once", func(t *testing.T) {
		lastHeartbeat := func() time.Time {
			at, _ := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { lastHeartbeatAt } }`,
				map[string]any{"id": runnerID})["runner"].(map[string]any)["lastHeartbeatAt"].(string)
			ts, _ := time.Parse(time.RFC3339Nano, at)
			return ts
		}
		cutDrill(t, sb, submit, job, waitState, lastHeartbeat, busybox)
	})

	t.Run("100 kill -9s of the agent at random points of its jobs' lives: every job ends, once", func(t *testing.T) {
		killDrill(t, sb, submit, waitState, busybox)
	})
}

// killDrill kills the agent 100 times (kill -9, then started at once, as
// Restart= would after its pause) while jobs keep coming, each kill at a
// random moment of whichever jobs are then being leased, started, run or
// reported. Every job must succeed, with its output exactly once: none
// lost, none run twice to its end, none stuck.
func killDrill(t *testing.T, sb sandbox, submit func(string, []string, int, map[string]any) string,
	waitState func(string, time.Duration, ...string) map[string]any, image string,
) {
	const kills = 100
	rng := rand.New(rand.NewPCG(20261202, 1))
	var ids []string
	start := time.Now()
	for k := range kills {
		ids = append(ids, submit(image, []string{"sh", "-c", fmt.Sprintf("sleep 0.%d; echo done", rng.IntN(10))}, 120, nil))
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // the kills' pace, at random points of the jobs' lives
		// reset-failed: systemd would stop restarting a unit killed this often.
		sb.must("exec", "sh", "-c", "systemctl kill -s KILL runmesh-agent; systemctl reset-failed runmesh-agent; systemctl restart runmesh-agent")
		if k%20 == 19 {
			t.Logf("%d kills in %v", k+1, time.Since(start).Round(time.Second))
		}
	}
	succeeded, duplicates, retried := 0, 0, 0
	for _, id := range ids {
		j := waitState(id, 3*time.Minute, "SUCCEEDED", "FAILED", "CANCELLED")
		switch {
		case j["state"] != "SUCCEEDED":
			t.Errorf("job %s ended %v: %v", id, j["state"], j["stateReason"])
		case j["logs"] != "done\n":
			duplicates++
			t.Errorf("job %s's output %q: run twice, or lost; its runs: %v", id, j["logs"], j["runs"])
		default:
			succeeded++
		}
		if j["attempt"].(float64) > 1 {
			retried++
		}
	}
	t.Logf("kill drill: %d kills in %v; %d jobs, %d succeeded with their output once, %d with output lost or repeated, "+
		"%d lost or stuck, %d needed another attempt (a kill between lease and start)",
		kills, time.Since(start).Round(time.Second), len(ids), succeeded, duplicates, len(ids)-succeeded-duplicates, retried)
}
