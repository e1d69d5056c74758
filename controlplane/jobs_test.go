package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

func (b *testBundle) submit(t testing.TB, token string, input map[string]any) (string, string) {
	t.Helper()
	data, code := b.gql(t, token, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id state } }`, map[string]any{"in": input})
	if code != "" {
		return "", code
	}
	return data["submitJob"].(map[string]any)["id"].(string), ""
}

func jobInput(pool uuid.UUID, mods ...func(map[string]any)) map[string]any {
	in := map[string]any{"poolId": pool, "image": "busybox", "command": []string{"echo", "hi"},
		"claim": map[string]any{"cores": 1, "wallClockSeconds": 60}}
	for _, m := range mods {
		m(in)
	}
	return in
}

func (b *testBundle) lease(t testing.TB, c *http.Client, req runnerapi.LeaseRequest) []runnerapi.Lease {
	t.Helper()
	body, _ := json.Marshal(req)
	r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var resp runnerapi.LeaseResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	return resp.Leases
}

// askForWork sends req to the runner listener at base (a replica's
// https://host:port) in the background: cancel withdraws it, answered
// says how it ended.
func askForWork(t testing.TB, c *http.Client, base string, req runnerapi.LeaseRequest) (cancel func(), answered <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body, err := json.Marshal(req)
	require.NoError(t, err)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+runnerapi.PathLeases, bytes.NewReader(body))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(r)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answered %s: %s", resp.Status, b)
			}
		}
		done <- err
	}()
	return cancel, done
}

// secondReplica starts another server on b's database and CA, with a
// store of its own: it learns of other replicas' changes only through
// LISTEN/NOTIFY. The caller stops it.
func (b *testBundle) secondReplica(t testing.TB) *controlplane.Server {
	t.Helper()
	second, err := controlplane.New(controlplane.Options{
		Pool: b.pool, Store: store.New(b.pool), AdminAddr: "127.0.0.1:0", RunnerAddr: "127.0.0.1:0", CA: b.keys, RunnerNames: []string{"127.0.0.1"},
	})
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	return second
}

func anyWork(wait int) runnerapi.LeaseRequest {
	big := runnerapi.Resources{Cores: 1000, MemoryMiB: 1 << 30, GPUs: 64}
	return runnerapi.LeaseRequest{Kinds: []string{"default"}, Largest: big, Free: big, Max: 1, WaitSeconds: wait, AgentInstance: testInstance}
}

func (b *testBundle) result(t testing.TB, c *http.Client, l runnerapi.Lease, req runnerapi.ResultRequest) reply {
	t.Helper()
	body, _ := json.Marshal(req)
	return b.call(t, c, http.MethodPost, runnerapi.PathLeaseResult(l.LeaseID), body)
}

func intp(v int) *int { return &v }

// leaseSeconds sets pool A's lease.
func (b *testBundle) leaseSeconds(t testing.TB, n int) {
	t.Helper()
	_, code := b.gql(t, b.platform, `mutation($id: ID!, $n: Int!) { updatePool(input: {id: $id, leaseSeconds: $n}) { id } }`,
		map[string]any{"id": b.poolA.ID, "n": n})
	require.Empty(t, code)
}

// leasedJob submits a job to pool A and leases it to a new approved runner:
// the job's id, the runner's client and the lease.
func (b *testBundle) leasedJob(t testing.TB) (string, *http.Client, runnerapi.Lease) {
	t.Helper()
	_, c, _ := b.approvedRunner(t, measured(0))
	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	leases := b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	return id, c, leases[0]
}

func TestJobLifecycleThroughTheAPIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	member := b.newAdmin(t, record.RoleOrgMember, &b.orgA.ID)
	_, c, _ := b.approvedRunner(t, measured(8))
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)}).Status)

	id, code := b.submit(t, member, jobInput(b.poolA.ID, func(in map[string]any) {
		in["env"] = []map[string]any{{"name": "API_KEY", "value": "s3cret"}}
	}))
	require.Empty(t, code)
	leases := b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, id, l.LeaseID)
	require.Equal(t, 1, l.Attempt)
	require.Equal(t, map[string]string{"API_KEY": "s3cret"}, l.Env, "the runner gets the value")

	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8), Leases: []runnerapi.HeldLease{
		{LeaseID: l.LeaseID, Attempt: 1, Phase: runnerapi.PhaseRunning},
		{LeaseID: uuid.NewString(), Attempt: 1, Phase: runnerapi.PhaseRunning},
	}})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `{"lease_id":"`+l.LeaseID+`","attempt":1,"action":"CONTINUE"}`)
	require.Contains(t, r.Body, `"action":"GONE"`)
	// Reported running again: still one RUNNING event.
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8), Leases: []runnerapi.HeldLease{{LeaseID: l.LeaseID, Attempt: 1, Phase: runnerapi.PhaseRunning}}})
	require.Equal(t, http.StatusOK, r.Status, r.Body)

	for i, chunk := range []string{"hello ", "world\n"} {
		body, _ := json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: i, Data: []byte(chunk)})
		require.Equal(t, http.StatusNoContent, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body).Status)
	}
	rr := b.result(t, c, l, runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0), ImageDigest: ptr("sha256:abc")})
	require.Equal(t, http.StatusOK, rr.Status, rr.Body)
	require.JSONEq(t, `{"state":"SUCCEEDED"}`, rr.Body)

	const q = `query($id: ID!) { job(id: $id) { state envNames logs events { nodes { type attempt } } runs { attempt runnerName exitCode imageDigest } } }`
	data, code := b.gql(t, b.platform, q, map[string]any{"id": id})
	require.Empty(t, code)
	job := data["job"].(map[string]any)
	require.Equal(t, "SUCCEEDED", job["state"])
	require.Equal(t, []any{"API_KEY"}, job["envNames"])
	require.Equal(t, "hello world\n", job["logs"])
	var types []string
	for _, e := range job["events"].(map[string]any)["nodes"].([]any) {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	require.Equal(t, []string{"SUBMITTED", "LEASED", "RUNNING", "SUCCEEDED"}, types, "every state change is an event")
	run := job["runs"].([]any)[0].(map[string]any)
	require.Equal(t, 0.0, run["exitCode"])
	require.Equal(t, "sha256:abc", run["imageDigest"])
	require.NotNil(t, run["runnerName"], "admins see where it ran")
	data, _ = b.gql(t, member, q, map[string]any{"id": id})
	require.Nil(t, data["job"].(map[string]any)["runs"].([]any)[0].(map[string]any)["runnerName"], "members do not")

	var leaked int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM audit_log WHERE detail::text LIKE '%s3cret%'").Scan(&leaked))
	require.Zero(t, leaked, "env values are redacted from the audit log")
}

func TestSubmissionIsScopedAndChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	member := b.newAdmin(t, record.RoleOrgMember, &b.orgA.ID)
	before := b.count(t, "SELECT count(*) FROM jobs")
	for name, c := range map[string]struct {
		input map[string]any
		code  string
	}{
		"another organisation's pool": {jobInput(b.poolB.ID), "NOT_FOUND"},
		"a pool that does not exist":  {jobInput(uuid.New()), "NOT_FOUND"},
		"no cores":                    {jobInput(b.poolA.ID, func(in map[string]any) { in["claim"] = map[string]any{"cores": 0, "wallClockSeconds": 1} }), "BAD_INPUT"},
		"too many GPUs":               {jobInput(b.poolA.ID, func(in map[string]any) { in["claim"] = map[string]any{"cores": 1, "gpus": 65, "wallClockSeconds": 1} }), "BAD_INPUT"},
		"bad env name":                {jobInput(b.poolA.ID, func(in map[string]any) { in["env"] = []map[string]any{{"name": "A=B", "value": "x"}} }), "BAD_INPUT"},
	} {
		_, code := b.submit(t, member, c.input)
		require.Equal(t, c.code, code, name)
	}
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"))

	// The same idempotency key is the same job.
	key := func(in map[string]any) { in["idempotencyKey"] = "nightly-7" }
	first, _ := b.submit(t, member, jobInput(b.poolA.ID, key))
	again, _ := b.submit(t, member, jobInput(b.poolA.ID, key))
	require.Equal(t, first, again)
}

func TestAStaleResultIsRefusedWith409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, first := b.leasedJob(t)
	// The lease expires and the lease rescuer gives the job a second attempt.
	_, err := b.pool.Exec(context.Background(), "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", id)
	require.NoError(t, err)
	var second []runnerapi.Lease
	require.Eventually(t, func() bool {
		_, err := b.pool.Exec(context.Background(), "UPDATE jobs SET available_at = now() WHERE id = $1 AND state = 'QUEUED'", id)
		require.NoError(t, err)
		second = b.lease(t, c, anyWork(0))
		return len(second) == 1
	}, 10*time.Second, 50*time.Millisecond, "requeued within lease + sweep interval")
	require.Equal(t, 2, second[0].Attempt)

	r := b.result(t, c, first, runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)})
	require.Equal(t, http.StatusConflict, r.Status, r.Body)
	require.Equal(t, runnerapi.CodeStaleAttempt, r.Code)
	body, _ := json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: 0, Data: []byte("late")})
	require.Equal(t, http.StatusConflict, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(id), body).Status)
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM job_logs"))
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM jobs WHERE state = 'SUCCEEDED'"))

	r = b.result(t, c, second[0], runnerapi.ResultRequest{Attempt: 2, ExitCode: intp(3)})
	require.JSONEq(t, `{"state":"FAILED"}`, r.Body)
	// Neither exit code nor reason, or both: refused.
	r = b.result(t, c, second[0], runnerapi.ResultRequest{Attempt: 2})
	require.Equal(t, http.StatusBadRequest, r.Status)
}

func TestSubmittingWakesAWaitingRunner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(0))
	got := make(chan time.Time, 1)
	go func() {
		leases := b.lease(t, c, anyWork(30))
		if len(leases) == 1 {
			got <- time.Now()
		}
		close(got)
	}()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1", id) == 1
	}, "the runner waits for work")
	submitted := time.Now()
	_, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	at, ok := <-got
	require.True(t, ok, "no lease")
	require.Less(t, at.Sub(submitted), time.Second)
}

// One runner holds at most queue.MaxLeaseRequestsPerRunner lease requests
// at once on a replica: the next is answered 429 too_many_requests at
// once, and when one ends there is room again. Another runner is not
// counted against it.
func TestARunnerHoldsFewLongPolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	var cancels []func()
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	var held []<-chan error
	for range queue.MaxLeaseRequestsPerRunner {
		cancel, answered := askForWork(t, c, b.runnerURL, anyWork(60))
		cancels = append(cancels, cancel)
		held = append(held, answered)
	}
	// The probes below count too while they are answered: they start once
	// every long poll waits, or one of those could find no room.
	testutil.Eventually(t, 30*time.Second, func() bool {
		return b.inFlight(t, "runner") == queue.MaxLeaseRequestsPerRunner
	}, "the long polls wait")
	body, err := json.Marshal(anyWork(0))
	require.NoError(t, err)
	var last reply
	defer func() {
		if t.Failed() {
			t.Logf("the last request past the bound was answered %d %s: %s", last.Status, last.Code, last.Body)
		}
	}()
	testutil.Eventually(t, 30*time.Second, func() bool {
		for i, answered := range held {
			select {
			case err := <-answered:
				t.Fatalf("long poll %d ended before its wait did: %v", i, err)
			default:
			}
		}
		last = b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
		return last.Status == http.StatusTooManyRequests && last.Code == runnerapi.CodeTooMany
	}, "a request past the bound is refused while the others wait")
	_, other, _ := b.approvedRunner(t, measured(0))
	require.Empty(t, b.lease(t, other, anyWork(0)), "another runner asks as before")

	cancels[0]()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return b.call(t, c, http.MethodPost, runnerapi.PathLeases, body).Status == http.StatusOK
	}, "room again once one request ended")
}

// A job given back waits out its backoff (2 s after a first host fault);
// a runner already waiting for work gets it when the backoff ends, not
// when its long-poll would have ended (30 s here).
func TestAJobGivenBackReachesAWaitingRunnerWhenItsBackoffEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	b.submit(t, b.platform, jobInput(b.poolA.ID))
	first := b.lease(t, c, anyWork(0))
	require.Len(t, first, 1)
	r := b.result(t, c, first[0], runnerapi.ResultRequest{Attempt: 1, ReturnReason: ptr("runtime went away"), HostFault: true})
	require.JSONEq(t, `{"state":"QUEUED"}`, r.Body)
	back := time.Now()

	again := b.lease(t, c, anyWork(30))
	waited := time.Since(back)
	require.Len(t, again, 1, "the long-poll ended empty")
	require.Equal(t, 2, again[0].Attempt)
	require.GreaterOrEqual(t, waited, queue.Backoff(1)-200*time.Millisecond, "leased before its backoff ended")
	require.Less(t, waited, queue.Backoff(1)+time.Second, "the backoff's end did not wake the waiting runner")
}

func TestCancellingARunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, l := b.leasedJob(t)
	_, code := b.gql(t, b.platform, `mutation($id: ID!) { cancelJob(id: $id) { state cancelRequested } }`, map[string]any{"id": id})
	require.Empty(t, code)
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(0), Leases: []runnerapi.HeldLease{{LeaseID: l.LeaseID, Attempt: 1, Phase: runnerapi.PhaseRunning}}})
	require.Contains(t, r.Body, `"action":"CANCEL"`)
	rr := b.result(t, c, l, runnerapi.ResultRequest{Attempt: 1, ReturnReason: ptr("cancelled")})
	require.JSONEq(t, `{"state":"CANCELLED"}`, rr.Body)
}

func TestHostFaultsInARowQuarantine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(0))
	for i := range 3 {
		b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["image"] = fmt.Sprintf("missing-%d", i) }))
		l := b.lease(t, c, anyWork(0))
		require.Len(t, l, 1, "fault %d", i)
		r := b.result(t, c, l[0], runnerapi.ResultRequest{Attempt: l[0].Attempt, ReturnReason: ptr("image would not pull"), HostFault: true})
		require.JSONEq(t, `{"state":"QUEUED"}`, r.Body, "a host fault gives the job back")
	}
	got := b.runner(t, id)
	require.Equal(t, true, got["quarantined"])
	require.Equal(t, "3 host faults in a row", got["quarantineReason"])
	require.Empty(t, b.lease(t, c, anyWork(0)), "a quarantined runner gets no work")

	// Cleared, it starts counting afresh: one more fault does not quarantine.
	data, code := b.gql(t, b.platform, `mutation($id: ID!) { clearQuarantine(id: $id) { quarantined failuresInARow } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{"quarantined": false, "failuresInARow": 0.0}, data["clearQuarantine"])
}

func TestAnExpiredLeaseIsRequeuedWithinLeasePlusSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.leaseSeconds(t, 5)
	_, c, _ := b.approvedRunner(t, measured(0))
	id, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	l := b.lease(t, c, anyWork(0))
	require.Len(t, l, 1)
	require.Equal(t, 5, l[0].LeaseSeconds)
	leased := time.Now()
	// No heartbeat: the lease runs out and the lease rescuer (every second) takes it back.
	var state string
	require.Eventually(t, func() bool {
		data, _ := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state } }`, map[string]any{"id": id})
		state = data["job"].(map[string]any)["state"].(string)
		return state == "QUEUED"
	}, 10*time.Second, 100*time.Millisecond)
	took := time.Since(leased)
	t.Logf("requeued %v after the lease", took)
	// Lease + sweep interval, with room for a loaded machine and the 100 ms poll.
	require.Less(t, took, 5*time.Second+time.Second+1500*time.Millisecond, "lease + sweep interval")
	require.GreaterOrEqual(t, took, 5*time.Second, "not before the lease ran out")
}

// A lease whose answer never reached its runner (the replica that granted
// it died first) is seen in the runner's heartbeats, which go on without
// naming it: it is given back as not delivered, with no try charged. A
// lease a heartbeat named once did reach the runner: losing it costs a try.
func TestALeaseItsRunnerNeverNamedIsGivenBackWithoutATry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.leaseSeconds(t, 5)
	_, c, _ := b.approvedRunner(t, measured(0))
	lost, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	named, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	leases := append(b.lease(t, c, anyWork(0)), b.lease(t, c, anyWork(0))...)
	require.Len(t, leases, 2)
	var namedLease runnerapi.Lease
	for _, l := range leases {
		if l.LeaseID == named {
			namedLease = l
		}
	}
	// One heartbeat names one of them (starting); then the runner forgets
	// both and goes on heartbeating, as one that never had the other would.
	b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(0),
		Leases: []runnerapi.HeldLease{{LeaseID: named, Attempt: namedLease.Attempt, Phase: runnerapi.PhaseStarting}}})
	job := func(id string) map[string]any {
		data, _ := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state attempt events { nodes { type detail } } runs { returnReason } } }`, map[string]any{"id": id})
		return data["job"].(map[string]any)
	}
	require.Eventually(t, func() bool {
		b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(0)})
		return job(lost)["state"] == "QUEUED" && job(named)["state"] == "QUEUED"
	}, 15*time.Second, time.Second)

	types := func(j map[string]any) (out []string) {
		for _, e := range j["events"].(map[string]any)["nodes"].([]any) {
			out = append(out, e.(map[string]any)["type"].(string))
		}
		return out
	}
	l := job(lost)
	require.Equal(t, []string{"SUBMITTED", "LEASED", "REQUEUED"}, types(l), "no LEASE_EXPIRED: no try charged")
	require.Equal(t, "lease not delivered: its runner heartbeated through the lease without naming it", l["events"].(map[string]any)["nodes"].([]any)[2].(map[string]any)["detail"])
	require.Equal(t, "not delivered", l["runs"].([]any)[0].(map[string]any)["returnReason"])
	require.Equal(t, []string{"SUBMITTED", "LEASED", "LEASE_EXPIRED"}, types(job(named)), "a lease named once reached the runner")

	// Given back at once, not after a backoff: the next request gets it.
	again := b.lease(t, c, anyWork(0))
	require.NotEmpty(t, again)
	require.Equal(t, lost, again[0].LeaseID)
}

// Two replicas on one database: runners lease from either, and every job
// is accepted exactly once.
func TestTwoReplicasCompleteEveryJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	second := b.secondReplica(t)
	defer second.Stop(context.Background())
	urls := []string{b.runnerURL, "https://" + second.RunnerAddr().String()}

	const jobs = 1000
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO jobs (pool_id, image, cores, memory_mib, gpus, wall_clock_seconds)
		SELECT $1, 'busybox', 1, 0, 0, 60 FROM generate_series(1, $2)`, b.poolA.ID, jobs)
	require.NoError(t, err)

	var accepted, stale atomic.Int64
	var wg sync.WaitGroup
	for i := range 6 {
		_, c, _ := b.approvedRunner(t, measured(0))
		base := urls[i%2]
		wg.Go(func() {
			req := anyWork(0)
			req.Max = 8
			for {
				body, _ := json.Marshal(req)
				resp, err := c.Post(base+runnerapi.PathLeases, "application/json", strings.NewReader(string(body)))
				require.NoError(t, err)
				var lr runnerapi.LeaseResponse
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&lr))
				resp.Body.Close()
				if len(lr.Leases) == 0 {
					return
				}
				for _, l := range lr.Leases {
					body, _ := json.Marshal(runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(0)})
					resp, err := c.Post(base+runnerapi.PathLeaseResult(l.LeaseID), "application/json", strings.NewReader(string(body)))
					require.NoError(t, err)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						accepted.Add(1)
					case http.StatusConflict:
						stale.Add(1)
					default:
						t.Errorf("result: HTTP %d", resp.StatusCode)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(jobs), accepted.Load())
	require.Zero(t, stale.Load())
	require.Equal(t, jobs, b.count(t, "SELECT count(*) FROM jobs WHERE state = 'SUCCEEDED' AND attempt = 1"))
	require.Equal(t, jobs, b.count(t, "SELECT count(*) FROM job_runs WHERE finished_at IS NOT NULL"))
}

// subscribe opens a graphql-transport-ws socket to the admin API and
// starts one subscription; next returns its payloads until "complete".
func (b *testBundle) subscribe(t testing.TB, token, query string, vars map[string]any) func() (map[string]any, bool) {
	t.Helper()
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := dialer.Dial("ws"+strings.TrimPrefix(b.adminURL, "http")+"/graphql", nil)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}}))
	var ack map[string]any
	require.NoError(t, conn.ReadJSON(&ack))
	require.Equal(t, "connection_ack", ack["type"])
	require.NoError(t, conn.WriteJSON(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}}))
	return func() (map[string]any, bool) {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		for {
			var m map[string]any
			require.NoError(t, conn.ReadJSON(&m))
			switch m["type"] {
			case "next":
				return m["payload"].(map[string]any), true
			case "complete":
				return nil, false
			case "error":
				t.Fatalf("subscription error: %v", m)
			}
		}
	}
}

// subscriptionRefusal subscribes over a websocket, as subscribe does,
// and returns the code of the error that refuses the subscription.
func (b *testBundle) subscriptionRefusal(t testing.TB, token, query string, vars map[string]any) string {
	t.Helper()
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := dialer.Dial("ws"+strings.TrimPrefix(b.adminURL, "http")+"/graphql", nil)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}}))
	var m map[string]any
	require.NoError(t, conn.ReadJSON(&m))
	require.Equal(t, "connection_ack", m["type"])
	require.NoError(t, conn.WriteJSON(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}}))
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	// gqlgen answers a resolver's refusal as an item with errors (then
	// complete), and a request that does not validate as an error message.
	var m2 struct {
		Type    string
		Payload json.RawMessage
	}
	require.NoError(t, conn.ReadJSON(&m2))
	type gqlError struct{ Extensions struct{ Code string } }
	var errs []gqlError
	switch m2.Type {
	case "error":
		require.NoError(t, json.Unmarshal(m2.Payload, &errs))
	case "next":
		var item struct{ Errors []gqlError }
		require.NoError(t, json.Unmarshal(m2.Payload, &item))
		errs = item.Errors
	}
	require.NotEmpty(t, errs, "%s: %s", m2.Type, m2.Payload)
	return errs[0].Extensions.Code
}

func TestJobLogsAndEventsStreamUntilTheJobEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	id, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	logs := b.subscribe(t, b.platform, `subscription($id: ID!) { jobLogs(jobId: $id) { attempt seq data } }`, map[string]any{"id": id})
	events := b.subscribe(t, b.platform, `subscription($id: ID!) { jobEvents(jobId: $id) { type attempt } }`, map[string]any{"id": id})

	l := b.lease(t, c, anyWork(0))[0]
	for i, chunk := range []string{"one\n", "two\n"} {
		body, _ := json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: i, Data: []byte(chunk)})
		require.Equal(t, http.StatusNoContent, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body).Status)
	}
	var got []string
	for len(got) < 2 {
		p, ok := logs()
		require.True(t, ok)
		got = append(got, p["data"].(map[string]any)["jobLogs"].(map[string]any)["data"].(string))
	}
	require.Equal(t, []string{"one\n", "two\n"}, got)

	b.result(t, c, l, runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)})
	var types []string
	for {
		p, ok := events()
		if !ok {
			break
		}
		types = append(types, p["data"].(map[string]any)["jobEvents"].(map[string]any)["type"].(string))
	}
	require.Equal(t, []string{"SUBMITTED", "LEASED", "SUCCEEDED"}, types, "then the subscription completes")
	_, ok := logs()
	require.False(t, ok, "the log subscription completes with the job")

	// Another organisation cannot follow the job.
	data, code := b.gql(t, b.adminB, `query($id: ID!) { job(id: $id) { id } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Nil(t, data["job"])
}

func TestBatchSubmissionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	member := b.newAdmin(t, record.RoleOrgMember, &b.orgA.ID)
	const mutation = `mutation($in: [SubmitJobInput!]!) { submitJobs(inputs: $in) { id state image } }`
	noCores := jobInput(b.poolA.ID, func(in map[string]any) { in["claim"] = map[string]any{"cores": 0, "wallClockSeconds": 1} })
	before := b.count(t, "SELECT count(*) FROM jobs")
	for name, c := range map[string]struct {
		inputs []map[string]any
		code   string
	}{
		"empty":                       {[]map[string]any{}, "BAD_INPUT"},
		"two pools":                   {[]map[string]any{jobInput(b.poolA.ID), jobInput(b.poolB.ID)}, "BAD_INPUT"},
		"one bad job":                 {[]map[string]any{jobInput(b.poolA.ID), noCores}, "BAD_INPUT"},
		"another organisation's pool": {[]map[string]any{jobInput(b.poolB.ID)}, "NOT_FOUND"},
		"a spec over 64 KiB": {[]map[string]any{jobInput(b.poolA.ID), jobInput(b.poolA.ID, func(in map[string]any) {
			in["env"] = []map[string]any{{"name": "BIG", "value": strings.Repeat("x", runnerapi.MaxJobSpecBytes)}}
		})}, "BAD_INPUT"},
	} {
		_, code := b.gql(t, member, mutation, map[string]any{"in": c.inputs})
		require.Equal(t, c.code, code, name)
	}
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"), "a refused batch queues nothing")

	var inputs []map[string]any
	for i := range 3 {
		inputs = append(inputs, jobInput(b.poolA.ID, func(in map[string]any) { in["image"] = fmt.Sprintf("img-%d", i) }))
	}
	data, code := b.gql(t, member, mutation, map[string]any{"in": inputs})
	require.Empty(t, code)
	jobs := data["submitJobs"].([]any)
	require.Len(t, jobs, 3)
	for i, j := range jobs {
		require.Equal(t, fmt.Sprintf("img-%d", i), j.(map[string]any)["image"])
		require.Equal(t, "QUEUED", j.(map[string]any)["state"])
	}
	require.Equal(t, before+3, b.count(t, "SELECT count(*) FROM jobs"))
}

// Several results in one request: each is fenced on its own, a malformed
// one refuses the whole batch, and accepted ones record runs, events and
// the runner's failures in a row in order.
func TestBatchResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	runnerID, c, _ := b.approvedRunner(t, measured(8))
	_, other, _ := b.approvedRunner(t, measured(8))
	var ids []string
	for i := 0; i < 4; i++ {
		id, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
		require.Empty(t, code)
		ids = append(ids, id)
	}
	req := anyWork(0)
	req.Max = 3
	mine := b.lease(t, c, req)
	require.Len(t, mine, 3)
	theirs := b.lease(t, other, anyWork(0))
	require.Len(t, theirs, 1)

	post := func(results []runnerapi.LeaseResult) reply {
		body, _ := json.Marshal(runnerapi.ResultsRequest{Results: results})
		return b.call(t, c, http.MethodPost, runnerapi.PathResults, body)
	}
	states := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT string_agg(state::text || ':' || (SELECT count(*) FROM job_events e WHERE e.job_id = j.id)::text, ',' ORDER BY id)
			FROM jobs j WHERE id = ANY($1::uuid[])`, ids).Scan(&s))
		return s
	}
	exit := func(l runnerapi.Lease, code int) runnerapi.LeaseResult {
		return runnerapi.LeaseResult{LeaseID: l.LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(code)}}
	}
	reason := "image would not pull"
	hostFault := runnerapi.LeaseResult{LeaseID: mine[2].LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: 1, ReturnReason: &reason, HostFault: true}}

	// Refused whole, and nothing changes. The results over the maximum are
	// each well formed, and together past runnerapi.MaxBodyBytes (results
	// have a bound of their own): only the count can refuse them.
	before := states()
	digest := "sha256:" + strings.Repeat("ab", 124)
	tooMany := make([]runnerapi.LeaseResult, runnerapi.MaxResultsPerRequest+1)
	for i := range tooMany {
		tooMany[i] = exit(mine[0], 0)
		tooMany[i].ImageDigest = &digest
	}
	if body, _ := json.Marshal(tooMany); len(body) <= runnerapi.MaxBodyBytes {
		t.Fatalf("the results over the maximum take %d bytes: not past MaxBodyBytes", len(body))
	}
	both := exit(mine[1], 0)
	both.ReturnReason = &reason
	wide, below, empty := 1<<40, int64(-1), ""
	outOfRange := exit(mine[0], 0)
	outOfRange.ExitCode = &wide
	negativePeak := exit(mine[0], 0)
	negativePeak.PeakMemoryMiB = &below
	emptyDigest := exit(mine[0], 0)
	emptyDigest.ImageDigest = &empty
	for name, bad := range map[string][]runnerapi.LeaseResult{
		"exit code past 32 bits": {exit(mine[1], 0), outOfRange},
		"negative peak memory":   {exit(mine[1], 0), negativePeak},
		"an empty digest":        {exit(mine[1], 0), emptyDigest},
		"empty":                  {},
		"exit code and reason":   {exit(mine[0], 0), both},
		"not a lease":            {exit(mine[0], 0), {LeaseID: "x", ResultRequest: runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)}}},
		"more than the maximum":  tooMany,
	} {
		r := post(bad)
		require.Equal(t, http.StatusBadRequest, r.Status, name)
		require.Equal(t, runnerapi.CodeBadRequest, r.Code, name)
		require.Equal(t, before, states(), name)
	}
	r := b.call(t, c, http.MethodPost, runnerapi.PathResults,
		fmt.Appendf(nil, `{"results": [{"lease_id": %q, "attempt": 1, "exit_code": 0, "return_reason": "%s"}]}`,
			mine[0].LeaseID, strings.Repeat(" ", runnerapi.MaxResultsBodyBytes)))
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Body)
	require.Equal(t, runnerapi.CodeTooLarge, r.Code)
	require.Equal(t, before, states())

	stale := exit(mine[1], 0)
	stale.Attempt = 2
	r = post([]runnerapi.LeaseResult{exit(mine[0], 0), stale, hostFault, exit(theirs[0], 0), exit(mine[0], 1), exit(mine[1], 7)})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var resp runnerapi.ResultsResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	var got []string
	for _, a := range resp.Results {
		if a.Error != nil {
			got = append(got, a.Error.Code)
		} else {
			got = append(got, a.State)
		}
	}
	require.Equal(t, []string{"SUCCEEDED", "stale_attempt", "QUEUED", "stale_attempt", "stale_attempt", "FAILED"}, got)
	var exitCodes, runningElsewhere, failures int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM job_runs WHERE job_id = ANY($1::uuid[]) AND finished_at IS NOT NULL),
		(SELECT count(*) FROM jobs WHERE id = $2 AND state = 'LEASED'),
		(SELECT failures_in_a_row FROM runners WHERE id = $3)`, ids, theirs[0].LeaseID, runnerID).Scan(&exitCodes, &runningElsewhere, &failures))
	require.Equal(t, 3, exitCodes, "three runs ended")
	require.Equal(t, 1, runningElsewhere, "another runner's lease is untouched")
	require.Equal(t, 0, failures, "a host fault then an exit code: the count is reset")
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state stateReason events { nodes { type } } } }`, map[string]any{"id": mine[1].LeaseID})
	require.Empty(t, code)
	require.Equal(t, "exited with code 7", data["job"].(map[string]any)["stateReason"])
}

// Failures in a row follow a batch's results in order: an exit code then a
// host fault leaves one, not a reset.
func TestHostFaultsInABatchCountInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runnerID, c, _ := b.approvedRunner(t, measured(8))
	for range 2 {
		_, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
		require.Empty(t, code)
	}
	req := anyWork(0)
	req.Max = 2
	held := b.lease(t, c, req)
	require.Len(t, held, 2)
	reason := "image would not pull"
	body, _ := json.Marshal(runnerapi.ResultsRequest{Results: []runnerapi.LeaseResult{
		{LeaseID: held[0].LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)}},
		{LeaseID: held[1].LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: 1, ReturnReason: &reason, HostFault: true}},
	}})
	r := b.call(t, c, http.MethodPost, runnerapi.PathResults, body)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Equal(t, 1, b.count(t, `SELECT failures_in_a_row FROM runners WHERE id = $1`, runnerID))
}

// Requests for work that could not be meant are refused and lease nothing.
func TestImpossibleLeaseRequestsLeaseNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(8))
	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	for name, mod := range map[string]func(*runnerapi.LeaseRequest){
		"max over the limit": func(r *runnerapi.LeaseRequest) { r.Max = runnerapi.MaxLeasesPerRequest + 1 },
		"negative max":       func(r *runnerapi.LeaseRequest) { r.Max = -1 },
		"no kinds":           func(r *runnerapi.LeaseRequest) { r.Kinds = nil },
		"a kind in capitals": func(r *runnerapi.LeaseRequest) { r.Kinds = []string{"Default"} },
		"negative free room": func(r *runnerapi.LeaseRequest) { r.Free.Cores = -1 },
	} {
		req := anyWork(0)
		mod(&req)
		body, _ := json.Marshal(req)
		r := b.call(t, c, http.MethodPost, runnerapi.PathLeases, body)
		require.Equal(t, http.StatusBadRequest, r.Status, name)
		require.Equal(t, runnerapi.CodeBadRequest, r.Code, name)
		require.Equal(t, 1, b.count(t, "SELECT count(*) FROM jobs WHERE id = '"+id+"' AND state = 'QUEUED'"), name)
	}
	require.Len(t, b.lease(t, c, anyWork(0)), 1, "a sound request gets the job")
}

// A lease granted as the runner stops asking (an agent draining, a dropped
// connection) never reaches it: the server gives it back at once, and it
// costs the job no try.
func TestALeaseTheRunnerNeverSawGoesBackAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runnerID, c, _ := b.approvedRunner(t, measured(0))
	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["maxAttempts"] = 1 }))
	require.Empty(t, code)

	// Hold the claim inside its statement (it writes the LEASED event)
	// until the request it serves has ended.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE job_events IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	cancel, answered := askForWork(t, c, b.runnerURL, anyWork(30))
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM pg_locks WHERE relation = 'job_events'::regclass AND NOT granted") == 1
	}, 10*time.Second, 10*time.Millisecond, "the claim waits")
	cancel()
	require.Error(t, <-answered, "the runner stopped asking")
	// No signal tells when the server has seen the request end, short of
	// the answer this test is about; 200 ms is its margin. (Had it not
	// seen it, writing the answer fails, and the leases go back too.)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, tx.Commit(ctx))

	// The claim ran to its end, leased attempt 1, and gave it back.
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM jobs WHERE id = $1 AND state = 'QUEUED' AND attempt = 1 AND undelivered = 1", id) == 1
	}, 10*time.Second, 10*time.Millisecond, "back in the queue long before its lease would run out")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM job_runs WHERE job_id = $1 AND attempt = 1 AND return_reason = 'not delivered' AND finished_at IS NOT NULL", id))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM job_events WHERE job_id = $1 AND attempt = 1 AND type = 'REQUEUED'", id))

	// Its one try is still to come.
	l := b.lease(t, c, anyWork(0))
	require.Len(t, l, 1)
	require.Equal(t, 2, l[0].Attempt)
	r := b.result(t, c, l[0], runnerapi.ResultRequest{Attempt: 2, ReturnReason: ptr("image would not pull"), HostFault: true})
	require.JSONEq(t, `{"state":"FAILED"}`, r.Body)
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { stateReason } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, "host fault: image would not pull; 1 of 1 attempts used", data["job"].(map[string]any)["stateReason"])
	require.Equal(t, 1, b.count(t, "SELECT failures_in_a_row FROM runners WHERE id = $1", runnerID), "a host fault on the job's first try")
}

// An attempt's output is kept up to a bound: a chunk past it is refused
// with log_limit and dropped, and the logs end with one note saying so.
// Fencing comes first: a stale attempt past the bound is still a 409.
func TestOutputPastTheBoundIsNotKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, l := b.leasedJob(t)
	upload := func(attempt, seq int, data string) reply {
		body, _ := json.Marshal(runnerapi.LogUpload{Attempt: attempt, Seq: seq, Data: []byte(data)})
		return b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body)
	}
	last := runnerapi.MaxLogChunksPerAttempt - 1
	require.Equal(t, http.StatusNoContent, upload(1, 0, "first\n").Status)
	require.Equal(t, http.StatusNoContent, upload(1, last, "last kept\n").Status)
	stale := upload(2, last+1, "not held")
	require.Equal(t, http.StatusConflict, stale.Status)
	require.Equal(t, runnerapi.CodeStaleAttempt, stale.Code)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM job_logs WHERE job_id = $1", id), "a stale chunk past the bound leaves no note")
	for _, seq := range []int{last + 1, last + 7, last + 1} {
		r := upload(1, seq, "dropped\n")
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "seq %d", seq)
		require.Equal(t, runnerapi.CodeLogLimit, r.Code, "seq %d", seq)
	}
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { logs } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, "first\nlast kept\n"+queue.LogLimitNote, data["job"].(map[string]any)["logs"])
}

// The job pruner of a running server prunes jobs past the retention (here
// all finished ones: the retention is a nanosecond) and nothing else.
func TestTheServerPrunesFinishedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *controlplane.Options) {
		o.SweepInterval, o.JobRetention = 20*time.Millisecond, time.Nanosecond
	})
	held, _, _ := b.leasedJob(t)
	done, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	waiting, _ := b.submit(t, b.platform, jobInput(b.poolA.ID))
	_, code := b.gql(t, b.platform, `mutation($id: ID!) { cancelJob(id: $id) { state } }`, map[string]any{"id": done})
	require.Empty(t, code)
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM jobs WHERE id = $1", done) == 0
	}, 10*time.Second, 20*time.Millisecond, "the cancelled job pruned")
	require.Zero(t, b.count(t, "SELECT count(*) FROM job_events WHERE job_id = $1", done))
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state } }`, map[string]any{"id": done})
	require.Empty(t, code)
	require.Nil(t, data["job"], "no such job any more")
	// Several passes later, the queued and the held job are still there:
	// a sleep that shows nothing happens.
	time.Sleep(500 * time.Millisecond)
	for id, state := range map[string]string{waiting: "QUEUED", held: "LEASED"} {
		data, code = b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state } }`, map[string]any{"id": id})
		require.Empty(t, code)
		require.Equal(t, state, data["job"].(map[string]any)["state"])
	}
}

// A running server prunes certificates long expired and keeps the others
// (the rule, each runner's newest included: TestExpiredCertificatesArePruned
// in the store).
func TestTheServerPrunesExpiredCertificates(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *controlplane.Options) { o.SweepInterval = 20 * time.Millisecond })
	runnerID, c, _ := b.approvedRunner(t, measured(0))
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO certificates (serial, runner_id, der, not_before, not_after)
		VALUES ('1001', $1, '\x00', now() - interval '41 days', now() - interval '40 days'),
		       ('1002', $1, '\x00', now() - interval '11 days', now() - interval '10 days')`, runnerID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM certificates WHERE serial = '1001'") == 0
	}, 10*time.Second, 20*time.Millisecond, "the certificate 40 days expired pruned")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM certificates WHERE serial = '1002'"), "10 days expired: kept")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM certificates WHERE runner_id = $1 AND not_after > now()", runnerID))
	require.Empty(t, b.lease(t, c, anyWork(0)), "the runner's certificate still works")
}

// A running server prunes audit entries past the retention, and keeps the
// others.
func TestTheServerPrunesTheAuditLog(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *controlplane.Options) { o.SweepInterval, o.AuditRetention = 20*time.Millisecond, time.Hour })
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO audit_log (at, actor_name, actor_role, action, outcome)
		VALUES (now() - interval '2 hours', 'a', 'PLATFORM_ADMIN', 'old', 'ok'), (now(), 'a', 'PLATFORM_ADMIN', 'new', 'ok')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM audit_log WHERE action = 'old'") == 0
	}, 10*time.Second, 20*time.Millisecond, "the entry two hours old pruned")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM audit_log WHERE action = 'new'"))
}

// A lease names the job's organisation and pool, for the agent's GPU
// metrics: in a platform pool, the organisation that submitted the job.
func TestALeaseNamesItsOrganisationAndPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, c, _ := b.approvedRunner(t, measured(0))
	_, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	l := b.lease(t, c, anyWork(0))
	require.Len(t, l, 1)
	require.Equal(t, [2]string{"org-a", "gpu"}, [2]string{l[0].Organisation, l[0].Pool})

	data, code := b.gql(t, b.platform, `mutation { createPool(input: {name: "shared"}) { id } }`, nil)
	require.Empty(t, code)
	shared := uuid.MustParse(data["createPool"].(map[string]any)["id"].(string))
	_, cs, _ := b.approvedRunnerIn(t, shared, measured(0))
	_, code = b.submit(t, b.newAdmin(t, record.RoleOrgMember, b.poolB.OrganisationID), jobInput(shared))
	require.Empty(t, code)
	l = b.lease(t, cs, anyWork(0))
	require.Len(t, l, 1)
	require.Equal(t, [2]string{"org-b", "shared"}, [2]string{l[0].Organisation, l[0].Pool}, "the submitter's organisation")
	_, code = b.submit(t, b.platform, jobInput(shared))
	require.Empty(t, code)
	l = b.lease(t, cs, anyWork(0))
	require.Len(t, l, 1)
	require.Equal(t, [2]string{"", "shared"}, [2]string{l[0].Organisation, l[0].Pool}, "the platform's own job")
}

// /metrics shows each pool's unfinished jobs by state and its held GPUs
// (read from PostgreSQL at the scrape), the job events this server wrote,
// and when its certificates expire.
func TestJobMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runnerID, c, _ := b.approvedRunner(t, measured(8))
	for range 3 {
		_, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
		require.Empty(t, code)
	}
	l := b.lease(t, c, anyWork(0))
	require.Len(t, l, 1)
	require.JSONEq(t, `{"state":"SUCCEEDED"}`, b.result(t, c, l[0], runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)}).Body)
	l = b.lease(t, c, anyWork(0))
	require.Len(t, l, 1)
	_, code := b.gql(t, b.platform, `mutation($r: ID!) { createHold(runnerId: $r, gpus: 2, reason: "maintenance", durationSeconds: 3600) { id } }`,
		map[string]any{"r": runnerID})
	require.Empty(t, code)
	// A platform pool's jobs, by who submitted them: the platform, or an
	// organisation.
	data, code := b.gql(t, b.platform, `mutation { createPool(input: {name: "shared"}) { id } }`, nil)
	require.Empty(t, code)
	shared := uuid.MustParse(data["createPool"].(map[string]any)["id"].(string))
	memberB := b.newAdmin(t, record.RoleOrgMember, b.poolB.OrganisationID)
	for _, token := range []string{b.platform, memberB, memberB} {
		_, code := b.submit(t, token, jobInput(shared))
		require.Empty(t, code)
	}

	resp, err := http.Get(b.adminURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	got := string(raw)
	for _, line := range []string{
		`runmesh_jobs{organisation="org-a",pool="gpu",state="QUEUED"} 1`,
		`runmesh_jobs{organisation="org-a",pool="gpu",state="LEASED"} 1`,
		`runmesh_jobs{organisation="org-a",pool="gpu",state="RUNNING"} 0`,
		`runmesh_jobs{organisation="org-a",pool="gpu",state="BLOCKED"} 0`,
		`runmesh_jobs{organisation="org-b",pool="gpu",state="QUEUED"} 0`,
		`runmesh_pool_gpus_held{organisation="org-a",pool="gpu"} 2`,
		`runmesh_jobs{organisation="",pool="shared",state="QUEUED"} 1`,
		`runmesh_jobs{organisation="org-b",pool="shared",state="QUEUED"} 2`,
		`runmesh_jobs{organisation="org-b",pool="shared",state="RUNNING"} 0`,
		`runmesh_pool_gpus_held{organisation="",pool="shared"} 0`,
		`runmesh_job_events_total{type="SUBMITTED"} 6`,
		`runmesh_job_events_total{type="LEASED"} 2`,
		`runmesh_job_events_total{type="SUCCEEDED"} 1`,
		`runmesh_job_events_total{type="LEASE_EXPIRED"} 0`,
		`runmesh_fleet_scrape_error 0`,
	} {
		require.True(t, strings.Contains(got, line+"\n"), "no line %s", line)
	}
	require.NotContains(t, got, `runmesh_pool_gpus_held{organisation="org-b",pool="shared"}`, "a pool's holds are its own entry's")
	for _, cert := range []string{"runner_listener", "ca_root", "ca_intermediate"} {
		series := `runmesh_certificate_expiry_timestamp_seconds{certificate="` + cert + `"} `
		i := strings.Index(got, series)
		require.GreaterOrEqual(t, i, 0, "no series for %s", cert)
		var at float64
		_, err := fmt.Sscanf(got[i+len(series):], "%g", &at)
		require.NoError(t, err, cert)
		require.Greater(t, at, float64(time.Now().Unix()), cert)
	}
}

// A job's logs in an answer are its last MiB or so, after a line saying how
// much came before: a list of many jobs with long output stays bounded.
func TestLogsInAnAnswerAreTheEndOfTheOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, l := b.leasedJob(t)
	const chunks, size = 40, runnerapi.MaxLogChunk
	for i := range chunks {
		data := fmt.Sprintf("%05d", i) + strings.Repeat("x", size-5)
		body, _ := json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: i, Data: []byte(data)})
		require.Equal(t, http.StatusNoContent, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body).Status)
	}
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { logs } }`, map[string]any{"id": id})
	require.Empty(t, code)
	logs := data["job"].(map[string]any)["logs"].(string)
	// Whole chunks from the end while they start inside the last MiB: 32.
	shown := graph.LogsTailBytes / size
	note := fmt.Sprintf(graph.LogsCutNote, (chunks-shown)*size)
	require.True(t, strings.HasPrefix(logs, note+fmt.Sprintf("%05d", chunks-shown)), "starts with the note, then chunk %d", chunks-shown)
	require.Len(t, logs, len(note)+shown*size)
	require.Equal(t, fmt.Sprintf("%05d", chunks-1), logs[len(logs)-size:][:5], "ends with the last chunk")
}

// A subscriber that joins late gets all of the output, in order, a page at
// a time, then the subscription completes with the job.
func TestALateLogSubscriberGetsAllTheOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, l := b.leasedJob(t)
	const chunks = 150 // more than two pages
	for i := range chunks {
		body, _ := json.Marshal(runnerapi.LogUpload{Attempt: 1, Seq: i, Data: []byte(fmt.Sprintf("%d\n", i))})
		require.Equal(t, http.StatusNoContent, b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body).Status)
	}
	b.result(t, c, l, runnerapi.ResultRequest{Attempt: 1, ExitCode: intp(0)})
	logs := b.subscribe(t, b.platform, `subscription($id: ID!) { jobLogs(jobId: $id) { seq data } }`, map[string]any{"id": id})
	for i := range chunks {
		p, ok := logs()
		require.True(t, ok, "chunk %d", i)
		chunk := p["data"].(map[string]any)["jobLogs"].(map[string]any)
		require.Equal(t, float64(i), chunk["seq"])
		require.Equal(t, fmt.Sprintf("%d\n", i), chunk["data"])
	}
	_, ok := logs()
	require.False(t, ok, "then it completes")
}

// A result sent again after it was accepted (its answer lost on the way)
// is answered as recorded, with the job's state, and changes nothing; one
// that says otherwise than what was recorded is stale.
func TestAResultSentAgainIsAnsweredAsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jobID, c, l := b.leasedJob(t)
	done := runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(0)}
	r := b.result(t, c, l, done)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.JSONEq(t, `{"state": "SUCCEEDED"}`, r.Body)
	written := func() [2]int {
		return [2]int{b.count(t, "SELECT count(*) FROM job_runs WHERE job_id = $1", jobID), b.count(t, "SELECT count(*) FROM job_events WHERE job_id = $1", jobID)}
	}
	before := written()

	r = b.result(t, c, l, done)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.JSONEq(t, `{"state": "SUCCEEDED", "already_recorded": true}`, r.Body)
	body, _ := json.Marshal(runnerapi.ResultsRequest{Results: []runnerapi.LeaseResult{{LeaseID: l.LeaseID, ResultRequest: done}}})
	r = b.call(t, c, http.MethodPost, runnerapi.PathResults, body)
	require.JSONEq(t, fmt.Sprintf(`{"results": [{"lease_id": %q, "state": "SUCCEEDED", "already_recorded": true}]}`, l.LeaseID), r.Body)

	r = b.result(t, c, l, runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(3)})
	require.Equal(t, http.StatusConflict, r.Status, r.Body)
	require.Equal(t, runnerapi.CodeStaleAttempt, r.Code)
	require.Equal(t, before, written(), "nothing changed")
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { state events { nodes { type } } } }`, map[string]any{"id": jobID})
	require.Empty(t, code)
	got, _ := json.Marshal(data["job"])
	require.JSONEq(t, `{"state": "SUCCEEDED", "events": {"nodes": [{"type": "SUBMITTED"}, {"type": "LEASED"}, {"type": "SUCCEEDED"}]}}`, string(got))
}

// Attempts the server cannot number (past 32 bits) are refused on every
// route that takes one, not narrowed onto another attempt; bodies that are
// not UTF-8 are refused, not stored as U+FFFD; cancelling a finished job is
// CONFLICT, not INTERNAL.
func TestRunnerInputIsTakenAsSentOrRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jobID, c, l := b.leasedJob(t)
	past := 1<<32 + l.Attempt // narrowed to 32 bits, it would be this attempt
	logs := func() int { return b.count(t, "SELECT count(*) FROM job_logs WHERE job_id = $1", jobID) }

	body, _ := json.Marshal(runnerapi.LogUpload{Attempt: past, Seq: 0, Data: []byte("forged\n")})
	r := b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), body)
	require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
	r = b.result(t, c, l, runnerapi.ResultRequest{Attempt: past, ExitCode: intp(0)})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(0), Leases: []runnerapi.HeldLease{{LeaseID: l.LeaseID, Attempt: past, Phase: "RUNNING"}}})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
	r = b.call(t, c, http.MethodPost, runnerapi.PathLeaseLogs(l.LeaseID), []byte("{\"attempt\": 1, \"seq\": 0, \"data\": \"\", \"x\": \"caf\xe9\"}"))
	require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
	require.Contains(t, r.Body, "UTF-8")
	require.Zero(t, logs(), "nothing stored")

	require.Equal(t, http.StatusOK, b.result(t, c, l, runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: intp(0)}).Status)
	_, code := b.gql(t, b.platform, `mutation($id: ID!) { cancelJob(id: $id) { state } }`, map[string]any{"id": jobID})
	require.Equal(t, "CONFLICT", code)
}
