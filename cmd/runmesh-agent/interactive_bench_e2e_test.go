package main_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// Goals of make bench-interactive (docs/benchmarks.md).
const (
	keystrokeGoal = 20 * time.Millisecond // p99 of a byte's round trip
	cpRatioGoal   = 0.5                   // runmesh cp's throughput over podman cp's
)

// TestInteractiveBenchmark is make bench-interactive (RUNMESH_BENCH=
// interactive; skipped otherwise). Two replicas: the agent in the sandbox
// speaks to the dev server (127.0.0.1), the CLI to a second replica
// (127.0.0.2), so every byte crosses both. It measures the round trip of
// single bytes through `runmesh attach` to `cat` in a PIPE job and back,
// and `runmesh cp` of 256 MiB each way against `podman cp` of the same file
// on the same host, taking turns; it fails when a goal is not met.
func TestInteractiveBenchmark(t *testing.T) {
	if os.Getenv("RUNMESH_BENCH") != "interactive" {
		t.Skip("make bench-interactive")
	}
	sb, serverBin, cliBin, agentBin := sandboxTest(t, "runmesh-agent")
	srv := e2e.StartDev(t, serverBin)
	poolID := srv.GraphQL(t, `{ pools { id } }`, nil)["pools"].([]any)[0].(map[string]any)["id"]
	sb.installAgent(t, srv, cliBin, agentBin, "sandbox-01", "metrics:\n  listen: \"off\"\n")
	sb.must("exec", "systemctl", "start", "runmesh-agent")
	other := srv.Replica(t, serverBin, "127.0.0.2")
	submit := func(stdio string, command ...string) string {
		in := map[string]any{"poolId": poolID, "image": "localhost/busybox:latest", "command": command,
			"claim": map[string]any{"cores": 0.5, "wallClockSeconds": 1800}}
		if stdio != "" {
			in["stdio"] = stdio
		}
		id := srv.GraphQL(t, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": in})["submitJob"].(map[string]any)["id"].(string)
		e2e.Eventually(t, 90*time.Second, "job "+id+" to run", func() bool {
			return srv.GraphQL(t, `query($id: ID!) { job(id: $id) { state } }`, map[string]any{"id": id})["job"].(map[string]any)["state"] == "RUNNING"
		})
		return id
	}
	cli := func(args ...string) *exec.Cmd {
		return exec.Command(cliBin, append([]string{"--env-file", other.EnvFile}, args...)...)
	}

	// Keystrokes: one byte in, its echo out, one at a time.
	echo := submit("PIPE", "cat")
	attach := cli("attach", echo)
	stdin, err := attach.StdinPipe()
	require.NoError(t, err)
	stdout, err := attach.StdoutPipe()
	require.NoError(t, err)
	attach.Stderr = os.Stderr
	require.NoError(t, attach.Start())
	t.Cleanup(func() { _ = attach.Process.Kill(); _ = attach.Wait() })
	b := make([]byte, 1)
	roundTrip := func(c byte) time.Duration {
		start := time.Now()
		_, err := stdin.Write([]byte{c})
		require.NoError(t, err)
		_, err = io.ReadFull(stdout, b)
		require.NoError(t, err)
		require.Equal(t, c, b[0])
		return time.Since(start)
	}
	e2e.Eventually(t, 30*time.Second, "the session to open", func() bool {
		done := make(chan time.Duration, 1)
		go func() { done <- roundTrip('.') }()
		select {
		case <-done:
			return true
		case <-time.After(10 * time.Second):
			t.Fatal("no echo")
			return false
		}
	})
	for range 50 { // warm up
		roundTrip('w')
	}
	const keystrokes = 1000
	rtts := make([]time.Duration, keystrokes)
	for i := range rtts {
		rtts[i] = roundTrip(byte('a' + i%26))
		time.Sleep(2 * time.Millisecond) // a fast typist, not a flood
	}
	slices.Sort(rtts)
	p50, p99, worst := rtts[keystrokes/2], rtts[keystrokes*99/100], rtts[keystrokes-1]
	met := p99 < keystrokeGoal
	fmt.Printf("keystroke round trip, %d bytes through runmesh attach (127.0.0.2) → replica 127.0.0.1 → agent → cat: p50 %s, p99 %s, max %s; goal p99 < %s: %s\n",
		keystrokes, ms(p50), ms(p99), ms(worst), keystrokeGoal, verdict(met))
	if !met {
		t.Errorf("keystroke p99 %s, goal < %s", p99, keystrokeGoal)
	}
	_ = stdin.Close()

	// cp: 256 MiB each way, runmesh and podman taking turns.
	box := submit("", "sleep", "1800")
	container := "runmesh-job-" + box + "-1"
	dir := filepath.Join(os.Getenv("RUNMESH_SANDBOX_DIR"), "bench-interactive") // seen inside the sandbox too
	require.NoError(t, os.MkdirAll(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { os.RemoveAll(dir) })
	blob := filepath.Join(dir, "blob.bin")
	data := make([]byte, 256<<20)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(blob, data, 0o644))
	require.NoError(t, os.Chmod(blob, 0o644))
	timed := func(c *exec.Cmd) time.Duration {
		start := time.Now()
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%v: %s", c.Args, out)
		return time.Since(start)
	}
	// podman cp as the runmesh user, timed inside the sandbox so that
	// entering it is not counted against podman.
	podmanCp := func(src, dst string) time.Duration {
		out := sb.must("user", "sh", "-c", `s=$(date +%s%N); podman cp "$1" "$2" >&2 || exit 1; e=$(date +%s%N); echo $((e-s))`, "sh", src, dst)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		require.NoError(t, err, out)
		return time.Duration(ns)
	}
	const turns = 3
	var rmIn, pmIn, rmOut, pmOut []time.Duration
	for i := range turns {
		rmIn = append(rmIn, timed(cli("cp", blob, box+":/tmp/runmesh.bin")))
		pmIn = append(pmIn, podmanCp(blob, container+":/tmp/podman.bin"))
		outDir := filepath.Join(dir, "out-"+strconv.Itoa(i))
		require.NoError(t, os.MkdirAll(outDir, 0o777))
		require.NoError(t, os.Chmod(outDir, 0o777))
		rmOut = append(rmOut, timed(cli("cp", box+":/tmp/runmesh.bin", filepath.Join(outDir, "runmesh.bin"))))
		pmOut = append(pmOut, podmanCp(container+":/tmp/podman.bin", filepath.Join(outDir, "podman.bin")))
		got, err := os.ReadFile(filepath.Join(outDir, "runmesh.bin"))
		require.NoError(t, err)
		require.True(t, slices.Equal(data, got), "runmesh cp changed the bytes")
		os.RemoveAll(outDir)
	}
	for _, c := range []struct {
		way             string
		runmesh, podman []time.Duration
	}{{"in", rmIn, pmIn}, {"out", rmOut, pmOut}} {
		r, p := median(c.runmesh), median(c.podman)
		ratio := p.Seconds() / r.Seconds()
		met := ratio >= cpRatioGoal
		fmt.Printf("cp 256 MiB %s: runmesh cp %s (%.0f MiB/s), podman cp %s (%.0f MiB/s), medians of %d turns; ratio %.2f; goal ≥ %.1f: %s\n",
			c.way, ms(r), 256/r.Seconds(), ms(p), 256/p.Seconds(), turns, ratio, cpRatioGoal, verdict(met))
		if !met {
			t.Errorf("cp %s: ratio %.2f, goal ≥ %.1f", c.way, ratio, cpRatioGoal)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT MET"
}
