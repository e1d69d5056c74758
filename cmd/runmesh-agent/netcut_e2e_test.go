package main_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// The agent's network for the cut drill: a network namespace joined to
// the host by a veth pair. The server's runner listener is on the host's
// end, so the agent reaches it only through the pair, and taking the
// host's end down cuts the agent off the way a failed switch or a
// partition does: its packets vanish, no connection is reset, and it goes
// on running, unaware.
const (
	cutNetns    = "runmesh-cut"
	cutHostLink = "rmcut0"
	cutHostAddr = "10.213.0.1"
)

// cutNetwork makes the namespace inside the sandbox (its /run is the
// sandbox's own) and returns the runner listener's address for the server;
// the pair's host end is in the host's network, which the sandbox shares,
// and goes with the namespace when the test ends.
func cutNetwork(t *testing.T, sb sandbox) string {
	t.Helper()
	sb.run("exec", "ip", "netns", "del", cutNetns) // a failed run's
	out, err := sb.run("exec", "sh", "-ec", `
		ip netns add `+cutNetns+`
		ip link add `+cutHostLink+` type veth peer name rmcut1 netns `+cutNetns+`
		ip addr add `+cutHostAddr+`/30 dev `+cutHostLink+`
		ip link set `+cutHostLink+` up
		ip -n `+cutNetns+` addr add 10.213.0.2/30 dev rmcut1
		ip -n `+cutNetns+` link set rmcut1 up
		ip -n `+cutNetns+` link set lo up`)
	require.NoError(t, err, "the cut drill needs a network namespace and a veth pair (iproute2, root): %s", out)
	t.Cleanup(func() {
		sb.run("exec", "ip", "netns", "del", cutNetns)
		sb.run("exec", "ip", "link", "del", cutHostLink)
	})
	return cutHostAddr + ":0"
}

// cutDrill runs the agent in the namespace and cuts it off for longer than
// its lease while two jobs run: one that ends during the cut (its result
// waits for a server that has already given the job to the next attempt)
// and one that is still running when the network comes back (the agent
// learns from its first heartbeat that the lease is gone and stops it).
// Each job must succeed once, on its second attempt, with only that
// attempt's output.
func cutDrill(t *testing.T, sb sandbox, submit func(string, []string, int, map[string]any) string,
	job func(string) map[string]any, waitState func(string, time.Duration, ...string) map[string]any,
	lastHeartbeat func() time.Time, image string,
) {
	dropIn := "/etc/systemd/system/runmesh-agent.service.d/cut.conf"
	sb.must("exec", "sh", "-c", "install -D -m 0644 /dev/null "+dropIn+" && printf '[Service]\\nNetworkNamespacePath=/run/netns/"+
		cutNetns+"\\n' > "+dropIn+" && systemctl daemon-reload && systemctl restart runmesh-agent")
	t.Cleanup(func() {
		sb.run("exec", "ip", "link", "set", cutHostLink, "up")
		sb.run("exec", "sh", "-c", "rm -f "+dropIn+" && systemctl daemon-reload && systemctl restart runmesh-agent")
	})
	ends := submit(image, []string{"sh", "-c", "sleep 3; echo ended"}, 120, nil)
	runs := submit(image, []string{"sh", "-c", "sleep 30; echo finished"}, 120, nil)
	waitState(ends, 60*time.Second, "RUNNING")
	waitState(runs, 60*time.Second, "RUNNING")

	sb.must("exec", "ip", "link", "set", cutHostLink, "down")
	cut := time.Now()
	e2e.Eventually(t, 40*time.Second, "both leases taken back from the cut-off runner", func() bool {
		return job(ends)["state"] == "QUEUED" && job(runs)["state"] == "QUEUED"
	})
	requeued := time.Since(cut)
	require.Contains(t, sb.jobUnits(), "runmesh-job-"+runs+"-1.service", "cut off, the agent cannot know: attempt 1 still runs")
	sb.must("exec", "ip", "link", "set", cutHostLink, "up")
	healed := time.Now()
	e2e.Eventually(t, 60*time.Second, "a heartbeat after the cut", func() bool { return lastHeartbeat().After(healed) })
	resumed := time.Since(healed)

	var released time.Duration
	for id, out := range map[string]string{ends: "ended\n", runs: "finished\n"} {
		j := waitState(id, 90*time.Second, "SUCCEEDED")
		require.EqualValues(t, 2, j["attempt"], "job %s", id)
		require.Equal(t, out, j["logs"], "job %s: only the second attempt's output", id)
		r := j["runs"].([]any)
		require.Len(t, r, 2)
		require.Equal(t, "lease expired", r[0].(map[string]any)["returnReason"])
		require.Nil(t, r[0].(map[string]any)["exitCode"], "attempt 1's result, sent after the cut, was refused")
		require.EqualValues(t, 0, r[1].(map[string]any)["exitCode"])
		leased, err := time.Parse(time.RFC3339Nano, r[1].(map[string]any)["leasedAt"].(string))
		require.NoError(t, err)
		released = max(released, leased.Sub(healed))
	}
	// Both had waited out their backoff (2 s) by then; before the end of a
	// backoff woke the waiting runner, they waited for its long-poll to end
	// (23 s here).
	require.Less(t, released, 10*time.Second, "the jobs waited long after the network came back")
	require.NotContains(t, sb.jobUnits(), "runmesh-job-"+runs+"-1.service", "the agent stopped the attempt it no longer held")
	t.Logf("network cut: leases taken back %v after the cut; after the network came back, the first heartbeat in %v "+
		"and both jobs leased again in %v", requeued.Round(100*time.Millisecond), resumed.Round(100*time.Millisecond),
		released.Round(100*time.Millisecond))
}
