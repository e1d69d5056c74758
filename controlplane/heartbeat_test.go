package controlplane_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

func measured(gpus int) runnerapi.Capacity {
	c := runnerapi.Capacity{
		Host:          runnerapi.HostCapacity{Hostname: "gpu-01", Cores: 64, MemoryMiB: 512 * 1024, MemoryAvailableMiB: 500 * 1024, DiskFreeMiB: 1 << 20},
		DriverVersion: "550.54.15",
		Labels: []runnerapi.Label{
			{Key: "runmesh.io/gpu.count", Value: fmt.Sprint(gpus), Source: runnerapi.LabelDetected},
			{Key: "rack", Value: "r12", Source: runnerapi.LabelDeclared},
		},
		GPUs: []runnerapi.GPU{},
	}
	for i := range gpus {
		c.GPUs = append(c.GPUs, runnerapi.GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Name: "NVIDIA H200", MemoryTotalMiB: 143771,
			MemoryUsedMiB: 1000, MemoryFreeMiB: 142771, Utilisation: 50, TemperatureC: 40, PowerWatts: 300, Healthy: true,
		})
	}
	return c
}

// enrolWithCapacity enrols, approves and returns a client certificate.
func (b *testBundle) approvedRunner(t testing.TB, c runnerapi.Capacity) (string, *http.Client, *tls.Certificate) {
	t.Helper()
	return b.approvedRunnerIn(t, b.poolA.ID, c)
}

// approvedRunnerIn is approvedRunner in another pool.
func (b *testBundle) approvedRunnerIn(t testing.TB, pool uuid.UUID, c runnerapi.Capacity) (string, *http.Client, *tls.Certificate) {
	t.Helper()
	k := newRunnerKey(t)
	body, _ := json.Marshal(runnerapi.EnrolRequest{Token: b.enrolmentToken(t, pool), Name: "gpu-" + uuid.NewString()[:8], PublicKey: k.pub(), CSR: k.csr, Capacity: c})
	r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, body)
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	var resp runnerapi.EnrolResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	b.approve(t, resp.RunnerID, k)
	cert := b.certificate(t, k, resp.RunnerID)
	// As an agent's survivor check would, in its first heartbeat: the
	// tests of leasing start from a runner that may take work.
	proof, _ := json.Marshal(isolated(testInstance))
	require.NoError(t, b.store.RecordRecovery(context.Background(), uuid.MustParse(resp.RunnerID), proof))
	return resp.RunnerID, b.client(cert), cert
}

// testInstance is the agent instance the tests' runners lease as.
const testInstance = "00000000-0000-4000-8000-000000000001"

func isolated(instance string) runnerapi.RecoveryProof {
	return runnerapi.RecoveryProof{AgentInstance: instance, BootID: "test-boot", SurvivorsChecked: true, Isolated: true}
}

func (b *testBundle) beat(t testing.TB, c *http.Client, req runnerapi.HeartbeatRequest) reply {
	t.Helper()
	body, _ := json.Marshal(req)
	return b.call(t, c, http.MethodPost, runnerapi.PathHeartbeat, body)
}

const runnerFields = `id online takingWork quarantined quarantineReason draining retired agentVersion lastHeartbeatAt
	capacity { hostname cores memoryMiB limitedBy gpusUnavailable driverVersion }
	gpus { index uuid name memoryTotalMiB utilisationPercent healthy health }
	labels { key value source } health { name ok severity title }`

func (b *testBundle) runner(t testing.TB, id string) map[string]any {
	t.Helper()
	data, code := b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { `+runnerFields+` } }`, map[string]any{"id": id})
	require.Empty(t, code)
	return data["runner"].(map[string]any)
}

func TestHeartbeatsMakeARunnerOnlineWithItsCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(8))

	// Approved, with the capacity reported at enrolment, but not online yet.
	got := b.runner(t, id)
	require.Equal(t, false, got["online"])
	require.Equal(t, false, got["takingWork"])
	require.Len(t, got["gpus"], 8)

	r := b.beat(t, c, runnerapi.HeartbeatRequest{RunnerID: id, AgentVersion: "1.2.3", Capacity: measured(8),
		Health: []runnerapi.Condition{{Name: "nvml", OK: true, Severity: "info", Title: "8 GPUs"}}})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.JSONEq(t, `{"next_heartbeat_seconds":10}`, r.Body)

	got = b.runner(t, id)
	require.Equal(t, true, got["online"])
	require.Equal(t, true, got["takingWork"])
	require.Equal(t, "1.2.3", got["agentVersion"])
	require.Equal(t, map[string]any{"hostname": "gpu-01", "cores": 64.0, "memoryMiB": 524288.0, "limitedBy": []any{}, "gpusUnavailable": nil, "driverVersion": "550.54.15"}, got["capacity"])
	gpu := got["gpus"].([]any)[3].(map[string]any)
	require.Equal(t, map[string]any{"index": 3.0, "uuid": "GPU-00000003", "name": "NVIDIA H200", "memoryTotalMiB": 143771.0, "utilisationPercent": 50.0, "healthy": true, "health": nil}, gpu)
	require.Contains(t, got["labels"], map[string]any{"key": "rack", "value": "r12", "source": "DECLARED"})
	require.Contains(t, got["labels"], map[string]any{"key": "runmesh.io/gpu.count", "value": "8", "source": "DETECTED"})
	require.Equal(t, []any{map[string]any{"name": "nvml", "ok": true, "severity": "info", "title": "8 GPUs"}}, got["health"])

	data, code := b.gql(t, b.platform, `query($p: ID!) { pool(id: $p) { runnerSeen } }`, map[string]any{"p": b.poolA.ID})
	require.Empty(t, code)
	require.NotNil(t, data["pool"].(map[string]any)["runnerSeen"])

	// Three missed beats (the pool's lease) later it is offline.
	_, err := b.pool.Exec(context.Background(), "UPDATE runners SET last_heartbeat_at = now() - interval '31 seconds' WHERE id = $1", id)
	require.NoError(t, err)
	got = b.runner(t, id)
	require.Equal(t, false, got["online"])
	require.Equal(t, true, got["takingWork"], "heard from within three minutes")

	// No admin control makes it online again.
	for _, m := range []string{"drainRunner", "resumeRunner", "clearQuarantine"} {
		_, code := b.gql(t, b.platform, fmt.Sprintf(`mutation($id: ID!) { %s(id: $id) { id } }`, m), map[string]any{"id": id})
		require.Empty(t, code, m)
		require.Equal(t, false, b.runner(t, id)["online"], m)
	}
}

func TestDriftQuarantinesUntilCleared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(8))

	// A GPU gone and less memory on another.
	less := measured(8)
	less.GPUs = less.GPUs[:7]
	less.GPUs[2].MemoryTotalMiB, less.GPUs[2].MemoryFreeMiB = 80000, 79000
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: less})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, r.Body, `"quarantined":true`)
	got := b.runner(t, id)
	require.Equal(t, true, got["quarantined"])
	require.Equal(t, false, got["takingWork"])
	require.Equal(t, true, got["online"], "a quarantined runner still heartbeats")
	require.Equal(t, "inventory drift: GPU GPU-00000002 has 80000 MiB of memory, approved with 143771 MiB; GPU GPU-00000007 is missing", got["quarantineReason"])

	// More than approved is not drift; the first reason stays.
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(9)})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Contains(t, b.runner(t, id)["quarantineReason"], "GPU-00000007 is missing")

	// Clearing accepts what the runner has now (9 GPUs); the same report is
	// then no drift, but losing one of the nine is.
	_, code := b.gql(t, b.platform, `mutation($id: ID!) { clearQuarantine(id: $id) { quarantined } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, false, b.runner(t, id)["quarantined"])
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(9)}).Status)
	require.Equal(t, false, b.runner(t, id)["quarantined"])
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(8)})
	require.Contains(t, r.Body, `"quarantined":true`)

	// A GPU that was never approved is drift too: placement would trust it.
	id3, c3, _ := b.approvedRunner(t, measured(2))
	b.beat(t, c3, runnerapi.HeartbeatRequest{Capacity: measured(3)})
	require.Equal(t, "inventory drift: GPU GPU-00000002 was not approved", b.runner(t, id3)["quarantineReason"])

	// Host memory shrinking is drift too.
	id2, c2, _ := b.approvedRunner(t, measured(0))
	small := measured(0)
	small.Host.MemoryMiB = 256 * 1024
	small.Host.MemoryAvailableMiB = 200 * 1024
	b.beat(t, c2, runnerapi.HeartbeatRequest{Capacity: small})
	require.Equal(t, "inventory drift: host memory is 262144 MiB, approved with 524288 MiB", b.runner(t, id2)["quarantineReason"])
}

func TestDrainAndRetire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(1))
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(1)}).Status)

	_, code := b.gql(t, b.platform, `mutation($id: ID!) { drainRunner(id: $id) { draining takingWork online } }`, map[string]any{"id": id})
	require.Empty(t, code)
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(1)})
	require.Contains(t, r.Body, `"draining":true`)
	got := b.runner(t, id)
	require.Equal(t, false, got["takingWork"])
	require.Equal(t, true, got["online"])

	_, code = b.gql(t, b.platform, `mutation($id: ID!) { resumeRunner(id: $id) { draining } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, true, b.runner(t, id)["takingWork"])

	data, code := b.gql(t, b.platform, `mutation($id: ID!) { retireRunner(id: $id, reason: "end of lease") { status statusReason retired takingWork } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, map[string]any{"status": "REVOKED", "statusReason": "retired: end of lease", "retired": true, "takingWork": false}, data["retireRunner"])
	r = b.call(t, c, http.MethodPost, runnerapi.PathHeartbeat, []byte(`{}`))
	require.Equal(t, http.StatusUnauthorized, r.Status, "a retired runner's certificate is revoked")
	_, code = b.gql(t, b.platform, `mutation($id: ID!) { resumeRunner(id: $id) { draining } }`, map[string]any{"id": id})
	require.Equal(t, "CONFLICT", code, "a retired runner does not come back")
}

func TestImpossibleHeartbeatsAreRefusedAndStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(2))
	other, _, _ := b.approvedRunner(t, measured(0))
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: measured(2), AgentVersion: "good"}).Status)
	state := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(),
			"SELECT last_heartbeat_at::text || agent_version || capacity::text || gpus::text || quarantine_reason || enforces_limits::text FROM runners WHERE id = $1", id).Scan(&s))
		return s
	}
	before := state()

	tooMany := measured(65)
	huge := measured(1)
	huge.GPUs[0].MemoryTotalMiB = runnerapi.MaxGPUMemoryMiB + 1
	negative := measured(1)
	negative.Host.Cores = -1
	overUsed := measured(1)
	overUsed.GPUs[0].MemoryUsedMiB = overUsed.GPUs[0].MemoryTotalMiB + 1
	twice := measured(2)
	twice.GPUs[1].UUID = twice.GPUs[0].UUID
	badLabel := measured(0)
	badLabel.Labels = append(badLabel.Labels, runnerapi.Label{Key: "x", Value: "y", Source: "guessed"})
	declaredDetected := measured(0)
	declaredDetected.Labels = append(declaredDetected.Labels, runnerapi.Label{Key: "runmesh.io/gpu.count", Value: "64", Source: "declared"})
	nul := measured(1)
	nul.GPUs[0].Name = "H200\x00"
	moreThanThere := measured(1)
	moreThanThere.Host.MemoryAvailableMiB = moreThanThere.Host.MemoryMiB + 1
	sameIndex := measured(2)
	sameIndex.GPUs[1].Index = 0
	badReason := measured(0)
	badReason.Limits = &runnerapi.LimitEnforcement{Memory: true, Reason: "x\x00"}
	marshal := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	held := func(n int) []runnerapi.HeldLease {
		leases := make([]runnerapi.HeldLease, n)
		for i := range leases {
			leases[i] = runnerapi.HeldLease{LeaseID: uuid.NewString(), Attempt: 1, Phase: runnerapi.PhaseRunning}
		}
		return leases
	}

	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"more than 64 GPUs", marshal(runnerapi.HeartbeatRequest{Capacity: tooMany}), 400, runnerapi.CodeBadRequest},
		{"GPU memory over 1 PiB", marshal(runnerapi.HeartbeatRequest{Capacity: huge}), 400, runnerapi.CodeBadRequest},
		{"negative cores", marshal(runnerapi.HeartbeatRequest{Capacity: negative}), 400, runnerapi.CodeBadRequest},
		{"used above total", marshal(runnerapi.HeartbeatRequest{Capacity: overUsed}), 400, runnerapi.CodeBadRequest},
		{"one UUID twice", marshal(runnerapi.HeartbeatRequest{Capacity: twice}), 400, runnerapi.CodeBadRequest},
		{"unknown label source", marshal(runnerapi.HeartbeatRequest{Capacity: badLabel}), 400, runnerapi.CodeBadRequest},
		{"declared runmesh.io label", marshal(runnerapi.HeartbeatRequest{Capacity: declaredDetected}), 400, runnerapi.CodeBadRequest},
		{"NUL in a GPU name", marshal(runnerapi.HeartbeatRequest{Capacity: nul}), 400, runnerapi.CodeBadRequest},
		{"NUL in agent_version", marshal(runnerapi.HeartbeatRequest{Capacity: measured(2), AgentVersion: "1\x00"}), 400, runnerapi.CodeBadRequest},
		{"more available than there is", marshal(runnerapi.HeartbeatRequest{Capacity: moreThanThere}), 400, runnerapi.CodeBadRequest},
		{"one index twice", marshal(runnerapi.HeartbeatRequest{Capacity: sameIndex}), 400, runnerapi.CodeBadRequest},
		{"NUL in the limits reason", marshal(runnerapi.HeartbeatRequest{Capacity: badReason}), 400, runnerapi.CodeBadRequest},
		{"NaN", `{"capacity":{"host":{"cores":NaN}}}`, 400, runnerapi.CodeBadRequest},
		{"another runner", marshal(runnerapi.HeartbeatRequest{RunnerID: other, Capacity: measured(2)}), 403, runnerapi.CodeForbidden},
		{"unknown field", `{"capacity":{},"gpus_extra":1}`, 400, runnerapi.CodeBadRequest},
		{"bad severity", marshal(runnerapi.HeartbeatRequest{Capacity: measured(2), Health: []runnerapi.Condition{{Name: "x", Severity: "panic"}}}), 400, runnerapi.CodeBadRequest},
		{"more leases than a runner holds", marshal(runnerapi.HeartbeatRequest{Capacity: measured(2), Leases: held(runnerapi.MaxHeldLeases + 1)}), 400, runnerapi.CodeBadRequest},
		{"oversize", `{"agent_version":"` + strings.Repeat("a", runnerapi.MaxHeartbeatBodyBytes) + `"}`, 413, runnerapi.CodeTooLarge},
	}
	for _, tc := range cases {
		r := b.call(t, c, http.MethodPost, runnerapi.PathHeartbeat, []byte(tc.body))
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.code, r.Code, tc.name)
	}
	require.Equal(t, before, state())

	// As many leases as a runner may hold fit one heartbeat, though they
	// take more than other requests may: each is answered.
	many := []byte(marshal(runnerapi.HeartbeatRequest{Capacity: measured(2), Leases: held(runnerapi.MaxHeldLeases)}))
	require.Greater(t, len(many), runnerapi.MaxBodyBytes)
	r := b.call(t, c, http.MethodPost, runnerapi.PathHeartbeat, many)
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var answer runnerapi.HeartbeatResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &answer))
	require.Len(t, answer.Leases, runnerapi.MaxHeldLeases)
	for _, l := range answer.Leases {
		require.Equal(t, runnerapi.LeaseGone, l.Action)
	}

	// Without a certificate there is no heartbeat at all.
	r = b.call(t, b.client(nil), http.MethodPost, runnerapi.PathHeartbeat, []byte(marshal(runnerapi.HeartbeatRequest{Capacity: measured(2)})))
	require.Equal(t, http.StatusUnauthorized, r.Status)
}

func TestRevocationReachesOtherReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, _, cert := b.approvedRunner(t, measured(0))
	// A second replica: it learns of the revocation only through
	// LISTEN/NOTIFY.
	second := b.secondReplica(t)
	defer second.Stop(context.Background())
	// The runner keeps a connection open to the second replica.
	kept := b.client(cert)
	url := "https://" + second.RunnerAddr().String() + runnerapi.PathWhoAmI
	resp, err := kept.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	_, code := b.gql(t, b.platform, `mutation($id: ID!) { revokeRunner(id: $id, reason: "x") { id } }`, map[string]any{"id": id})
	require.Empty(t, code)
	revoked := time.Now()
	testutil.Eventually(t, time.Second, func() bool {
		// Refused on the open connection (401), or at a new handshake (error).
		resp, err := kept.Get(url)
		if err != nil {
			return true
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	}, "the other replica still accepts the revoked runner")
	t.Logf("refused by the other replica %v after the revocation", time.Since(revoked))
}

func TestReportedLimitsGateMemoryClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, c, _ := b.approvedRunner(t, measured(0))
	member := b.newAdmin(t, record.RoleOrgMember, &b.orgA.ID)
	const q = `query($id: ID!) { runner(id: $id) { enforcesLimits capacity { limits { memory cpu pids reason } } } }`
	view := func() map[string]any {
		data, code := b.gql(t, b.platform, q, map[string]any{"id": id})
		require.Empty(t, code)
		return data["runner"].(map[string]any)
	}
	// An agent that says nothing enforces nothing.
	require.Equal(t, map[string]any{"enforcesLimits": false, "capacity": map[string]any{"limits": map[string]any{
		"memory": false, "cpu": false, "pids": false, "reason": "the agent did not report which limits it enforces"}}}, view())

	claimsMemory := jobInput(b.poolA.ID, func(in map[string]any) {
		in["claim"] = map[string]any{"cores": 1, "memoryMiB": 1024, "wallClockSeconds": 60}
	})
	jobID, code := b.submit(t, member, claimsMemory)
	require.Empty(t, code)
	report := measured(0)
	report.Limits = &runnerapi.LimitEnforcement{Reason: "cgroup v1: rootless Podman ignores resource limits"}
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: report}).Status)
	require.Empty(t, b.lease(t, c, anyWork(0)), "a memory claim never goes to a runner that cannot hold a job to it")
	// The blocked check finds it unplaceable (as it may at any time).
	_, err := b.store.BlockUnplaceable(context.Background(), time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM jobs WHERE id = $1 AND state = 'BLOCKED'", jobID))
	require.Equal(t, "cgroup v1: rootless Podman ignores resource limits", view()["capacity"].(map[string]any)["limits"].(map[string]any)["reason"])

	// A pool may allow it; the first job goes, and the rule is put back.
	allow := func(v bool) {
		data, code := b.gql(t, b.platform, `mutation($id: ID!, $v: Boolean) { updatePool(input: {id: $id, allowUnenforcedMemory: $v}) { allowUnenforcedMemory } }`,
			map[string]any{"id": b.poolA.ID, "v": v})
		require.Empty(t, code)
		require.Equal(t, v, data["updatePool"].(map[string]any)["allowUnenforcedMemory"])
	}
	allow(true)
	leases := b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, jobID, leases[0].LeaseID)
	allow(false)
	jobID, code = b.submit(t, member, claimsMemory)
	require.Empty(t, code)
	require.Empty(t, b.lease(t, c, anyWork(0)))

	report.Limits = &runnerapi.LimitEnforcement{Memory: true, CPU: true, Pids: true}
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: report}).Status)
	require.Equal(t, map[string]any{"enforcesLimits": true, "capacity": map[string]any{"limits": map[string]any{
		"memory": true, "cpu": true, "pids": true, "reason": nil}}}, view())
	leases = b.lease(t, c, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, jobID, leases[0].LeaseID)
}

func TestRunnerEventsFollowAPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	member := b.newAdmin(t, record.RoleOrgMember, &b.orgA.ID)
	first, c, _ := b.approvedRunner(t, measured(2))

	// Another organisation's pool cannot be followed.
	require.Equal(t, "NOT_FOUND", b.subscriptionRefusal(t, member, `subscription($p: ID!) { runnerEvents(poolId: $p) { id } }`, map[string]any{"p": b.poolB.ID}))

	next := b.subscribe(t, member, `subscription($p: ID!) { runnerEvents(poolId: $p) { id status draining quarantined } }`, map[string]any{"p": b.poolA.ID})
	// Delivery is at least once: a notification still in flight when the
	// subscription began (the first runner's approval) sends that runner
	// again. So expect reads until the wanted state arrives; a runner of
	// another pool must never arrive.
	others := map[string]bool{}
	expect := func(want map[string]any, what string) {
		t.Helper()
		for {
			payload, ok := next()
			require.True(t, ok, what)
			got := payload["data"].(map[string]any)["runnerEvents"].(map[string]any)
			require.False(t, others[got["id"].(string)], "%s: a runner of another pool was sent: %v", what, got)
			if reflect.DeepEqual(got, want) {
				return
			}
		}
	}
	expect(map[string]any{"id": first, "status": "APPROVED", "draining": false, "quarantined": false}, "the pool as it is")

	// Runners of other pools, the organisation's own included, send nothing.
	others[b.enrol(t, newRunnerKey(t), b.poolB.ID, "elsewhere")] = true
	data, code := b.gql(t, b.platform, `mutation($o: ID) { createPool(input: {organisationId: $o, name: "cpu"}) { id } }`, map[string]any{"o": b.orgA.ID})
	require.Empty(t, code)
	others[b.enrol(t, newRunnerKey(t), uuid.MustParse(data["createPool"].(map[string]any)["id"].(string)), "next-door")] = true
	k := newRunnerKey(t)
	second := b.enrol(t, k, b.poolA.ID, "second")
	expect(map[string]any{"id": second, "status": "PENDING", "draining": false, "quarantined": false}, "enrolment")

	_, code = b.gql(t, b.platform, `mutation($id: ID!) { drainRunner(id: $id) { id } }`, map[string]any{"id": first})
	require.Empty(t, code)
	expect(map[string]any{"id": first, "status": "APPROVED", "draining": true, "quarantined": false}, "drain")

	// Drift found by a heartbeat quarantines it.
	less := measured(2)
	less.GPUs = less.GPUs[:1]
	require.Equal(t, http.StatusOK, b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: less}).Status)
	expect(map[string]any{"id": first, "status": "APPROVED", "draining": true, "quarantined": true}, "drift")
}
