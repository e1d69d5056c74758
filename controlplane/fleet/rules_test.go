package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// What a capacity report stores: the report without its GPUs, the GPUs
// apart (an empty list for none), the host's size, how many GPUs and how
// many of them healthy, and whether the runner enforces memory limits.
func TestAReportAsStored(t *testing.T) {
	t.Parallel()
	c := runnerapi.Capacity{
		Host: runnerapi.HostCapacity{Hostname: "gpu-01", Cores: 32, MemoryMiB: 262144},
		GPUs: []runnerapi.GPU{{UUID: "GPU-a", Healthy: true}, {UUID: "GPU-b", Index: 1}, {UUID: "GPU-c", Index: 2, Healthy: true}},
	}
	rep, err := fleet.Report(c)
	require.NoError(t, err)
	require.Equal(t, 3, rep.GPUCount)
	require.Equal(t, 2, rep.GPUsHealthy)
	require.Equal(t, float64(32), rep.Cores)
	require.Equal(t, int64(262144), rep.MemoryMiB)
	require.False(t, rep.EnforcesMemory)
	var gpus []runnerapi.GPU
	require.NoError(t, json.Unmarshal(rep.GPUs, &gpus))
	require.Equal(t, c.GPUs, gpus)
	var stored map[string]any
	require.NoError(t, json.Unmarshal(rep.Capacity, &stored))
	require.Nil(t, stored["gpus"], "the GPUs are stored apart")
	require.Equal(t, "gpu-01", stored["host"].(map[string]any)["hostname"])

	rep, err = fleet.Report(runnerapi.Capacity{Limits: &runnerapi.LimitEnforcement{Memory: true}})
	require.NoError(t, err)
	require.JSONEq(t, `[]`, string(rep.GPUs))
	require.Zero(t, rep.GPUCount)
	require.True(t, rep.EnforcesMemory)
	rep, err = fleet.Report(runnerapi.Capacity{Limits: &runnerapi.LimitEnforcement{CPU: true}})
	require.NoError(t, err)
	require.False(t, rep.EnforcesMemory, "limits, but not of memory")
}

// Drift from the approved inventory: a GPU gone, one with less memory,
// one never approved, or the host below 98 % of its approved memory. Each
// difference is named, in order; none is "". Without an inventory there
// is nothing to drift from.
func TestDrift(t *testing.T) {
	t.Parallel()
	inv := &record.Inventory{MemoryMiB: 100000, GPUs: []record.InventoryGPU{{UUID: "GPU-a", MemoryTotalMiB: 81920}, {UUID: "GPU-b", MemoryTotalMiB: 81920}}}
	report := func(hostMiB int64, gpus ...runnerapi.GPU) runnerapi.Capacity {
		return runnerapi.Capacity{Host: runnerapi.HostCapacity{MemoryMiB: hostMiB}, GPUs: gpus}
	}
	a, b := runnerapi.GPU{UUID: "GPU-a", MemoryTotalMiB: 81920}, runnerapi.GPU{UUID: "GPU-b", MemoryTotalMiB: 81920}
	smaller := runnerapi.GPU{UUID: "GPU-b", MemoryTotalMiB: 81919}
	larger := runnerapi.GPU{UUID: "GPU-b", MemoryTotalMiB: 98304}
	extra := runnerapi.GPU{UUID: "GPU-z", MemoryTotalMiB: 81920}
	for _, c := range []struct {
		name string
		inv  *record.Inventory
		c    runnerapi.Capacity
		want string
	}{
		{"no inventory", nil, report(1), ""},
		{"as approved", inv, report(100000, a, b), ""},
		{"a GPU with more memory", inv, report(100000, a, larger), ""},
		{"the host at 98 %", inv, report(98000, a, b), ""},
		{"the host below 98 %", inv, report(97999, a, b), "inventory drift: host memory is 97999 MiB, approved with 100000 MiB"},
		{"a GPU gone", inv, report(100000, a), "inventory drift: GPU GPU-b is missing"},
		{"a GPU with less memory", inv, report(100000, a, smaller), "inventory drift: GPU GPU-b has 81919 MiB of memory, approved with 81920 MiB"},
		{"a GPU never approved", inv, report(100000, a, b, extra), "inventory drift: GPU GPU-z was not approved"},
		{"all of them, in order", inv, report(50000, smaller, extra),
			"inventory drift: GPU GPU-a is missing; GPU GPU-b has 81919 MiB of memory, approved with 81920 MiB; GPU GPU-z was not approved; " +
				"host memory is 50000 MiB, approved with 100000 MiB"},
	} {
		require.Equal(t, c.want, fleet.Drift(c.inv, c.c), c.name)
	}
}

// The faults a report shows of GPUs the server holds none against are new,
// stamped with when the server recorded them; a GPU without one, or
// already held, brings none.
func TestNewFaults(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	seen := now.Add(-time.Minute)
	fault := func(uuid string) *runnerapi.GPUFault {
		return &runnerapi.GPUFault{UUID: uuid, XID: 79, ObservedAt: seen}
	}
	c := runnerapi.Capacity{GPUs: []runnerapi.GPU{{UUID: "GPU-a", Fault: fault("GPU-a")}, {UUID: "GPU-b"}, {UUID: "GPU-c", Fault: fault("GPU-c")}}}
	got := fleet.NewFaults(c, runnerapi.Faulted([]runnerapi.GPUFault{*fault("GPU-c")}), now)
	require.Equal(t, []runnerapi.GPUFault{{UUID: "GPU-a", XID: 79, ObservedAt: seen, RecordedAt: &now}}, got)
	require.Nil(t, c.GPUs[0].Fault.RecordedAt, "the report is left as it came")
	require.Empty(t, fleet.NewFaults(runnerapi.Capacity{GPUs: []runnerapi.GPU{{UUID: "GPU-b"}}}, nil, now))
}

// A runner is online while its last heartbeat is younger than three
// heartbeat intervals of its pool's lease (the default lease when its pool
// has none).
func TestOnline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	own := 90
	runner := func(last *time.Time, lease *int) record.Runner {
		r := record.Runner{PoolLeaseSeconds: lease}
		r.LastHeartbeatAt = last
		return r
	}
	require.Equal(t, 90, fleet.LeaseSeconds(runner(nil, &own), 30))
	require.Equal(t, 30, fleet.LeaseSeconds(runner(nil, nil), 30))
	for _, c := range []struct {
		name string
		r    record.Runner
		want bool
	}{
		{"never heartbeated", runner(nil, nil), false},
		{"just now", runner(at(0), nil), true},
		{"within three intervals of the default lease", runner(at(29*time.Second), nil), true},
		{"three intervals ago", runner(at(30*time.Second), nil), false},
		{"within three intervals of its pool's lease", runner(at(89*time.Second), &own), true},
		{"three of its pool's intervals ago", runner(at(90*time.Second), &own), false},
	} {
		require.Equal(t, c.want, fleet.Online(c.r, 30, now), c.name)
	}
}

// A runner takes work when approved, not quarantined, draining or retired,
// its agent's survivor check proved it isolated, and it asked for work or
// heartbeated within three minutes.
func TestTakingWork(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	agent := uuid.NewString()
	taking := func(f func(*record.Runner)) bool {
		r := record.Runner{Status: record.RunnerApproved}
		r.Recovery = &runnerapi.RecoveryProof{AgentInstance: agent, SurvivorsChecked: true, Isolated: true}
		r.LastHeartbeatAt = at(time.Minute)
		if f != nil {
			f(&r)
		}
		return fleet.TakingWork(r, now)
	}
	require.True(t, taking(nil))
	for name, f := range map[string]func(*record.Runner){
		"pending":             func(r *record.Runner) { r.Status = record.RunnerPending },
		"quarantined":         func(r *record.Runner) { r.QuarantinedAt = at(0) },
		"draining":            func(r *record.Runner) { r.Draining = true },
		"retired":             func(r *record.Runner) { r.RetiredAt = at(0) },
		"no proof":            func(r *record.Runner) { r.Recovery = nil },
		"not isolated":        func(r *record.Runner) { r.Recovery.Isolated = false },
		"never heard from":    func(r *record.Runner) { r.LastHeartbeatAt = nil },
		"heard three min ago": func(r *record.Runner) { r.LastHeartbeatAt = at(3 * time.Minute) },
		"asked three min ago": func(r *record.Runner) { r.LastHeartbeatAt, r.LastWorkRequestAt = nil, at(3*time.Minute) },
		"both three min ago":  func(r *record.Runner) { r.LastHeartbeatAt, r.LastWorkRequestAt = at(3*time.Minute), at(3*time.Minute) },
	} {
		require.False(t, taking(f), name)
	}
	require.True(t, taking(func(r *record.Runner) { r.LastHeartbeatAt, r.LastWorkRequestAt = nil, at(179*time.Second) }), "asked for work lately")
	require.True(t, taking(func(r *record.Runner) { r.LastHeartbeatAt, r.LastWorkRequestAt = at(179*time.Second), at(time.Hour) }), "heartbeated lately")
}

// A heartbeat is refused when it names another runner than the
// certificate (forbidden), or reports what no agent could (bad request),
// on each bound.
func TestAHeartbeatIsChecked(t *testing.T) {
	t.Parallel()
	me := uuid.NewString()
	conditions := func(n int) []runnerapi.Condition {
		cs := make([]runnerapi.Condition, n)
		for i := range cs {
			cs[i] = runnerapi.Condition{Name: "c", Severity: "info"}
		}
		return cs
	}
	held := func(n int) []runnerapi.HeldLease {
		ls := make([]runnerapi.HeldLease, n)
		for i := range ls {
			ls[i] = runnerapi.HeldLease{LeaseID: uuid.NewString(), Attempt: 1}
		}
		return ls
	}
	for _, c := range []struct {
		name string
		f    func(*runnerapi.HeartbeatRequest)
		code string // "" when taken
	}{
		{"as the agent sends it", nil, ""},
		{"naming no runner", func(r *runnerapi.HeartbeatRequest) { r.RunnerID = "" }, ""},
		{"naming another runner", func(r *runnerapi.HeartbeatRequest) { r.RunnerID = uuid.NewString() }, runnerapi.CodeForbidden},
		{"an impossible capacity", func(r *runnerapi.HeartbeatRequest) { r.Capacity.Host.Cores = -1 }, runnerapi.CodeBadRequest},
		{"the most leases", func(r *runnerapi.HeartbeatRequest) { r.Leases = held(runnerapi.MaxHeldLeases) }, ""},
		{"past the most leases", func(r *runnerapi.HeartbeatRequest) { r.Leases = held(runnerapi.MaxHeldLeases + 1) }, runnerapi.CodeBadRequest},
		{"a lease of no attempt", func(r *runnerapi.HeartbeatRequest) { r.Leases = []runnerapi.HeldLease{{LeaseID: "x", Attempt: 0}} }, runnerapi.CodeBadRequest},
		{"the most conditions", func(r *runnerapi.HeartbeatRequest) { r.Health = conditions(32) }, ""},
		{"past the most conditions", func(r *runnerapi.HeartbeatRequest) { r.Health = conditions(33) }, runnerapi.CodeBadRequest},
		{"a condition without a name", func(r *runnerapi.HeartbeatRequest) {
			r.Health = []runnerapi.Condition{{Severity: "info"}}
		}, runnerapi.CodeBadRequest},
		{"a long condition name", func(r *runnerapi.HeartbeatRequest) {
			r.Health = []runnerapi.Condition{{Name: strings.Repeat("n", 65), Severity: "info"}}
		}, runnerapi.CodeBadRequest},
		{"a long title", func(r *runnerapi.HeartbeatRequest) {
			r.Health = []runnerapi.Condition{{Name: "n", Title: strings.Repeat("t", 513), Severity: "error"}}
		}, runnerapi.CodeBadRequest},
		{"a title at its bound", func(r *runnerapi.HeartbeatRequest) {
			r.Health = []runnerapi.Condition{{Name: strings.Repeat("n", 64), Title: strings.Repeat("t", 512), Severity: "warning"}}
		}, ""},
		{"an unknown severity", func(r *runnerapi.HeartbeatRequest) { r.Health = []runnerapi.Condition{{Name: "n", Severity: "fatal"}} }, runnerapi.CodeBadRequest},
		{"a long agent version", func(r *runnerapi.HeartbeatRequest) { r.AgentVersion = strings.Repeat("v", 65) }, runnerapi.CodeBadRequest},
		{"a proof", func(r *runnerapi.HeartbeatRequest) {
			r.Recovery = &runnerapi.RecoveryProof{AgentInstance: uuid.NewString(), SurvivorsChecked: true, Isolated: true}
		}, ""},
		{"a proof that could not be", func(r *runnerapi.HeartbeatRequest) {
			r.Recovery = &runnerapi.RecoveryProof{AgentInstance: "not a uuid"}
		}, runnerapi.CodeBadRequest},
	} {
		req := runnerapi.HeartbeatRequest{RunnerID: me, AgentVersion: "1.4.0", Capacity: runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 4, MemoryMiB: 4096}}}
		if c.f != nil {
			c.f(&req)
		}
		err := fleet.CheckHeartbeat(req, me)
		if c.code == "" {
			require.NoError(t, err, c.name)
			continue
		}
		var body *runnerapi.ErrorBody
		require.ErrorAs(t, err, &body, c.name)
		require.Equal(t, c.code, body.Code, c.name)
	}
}

// Of each lease a heartbeat reports: CONTINUE one the runner holds at
// exactly that attempt, CANCEL one whose job was asked to stop, GONE
// anything else.
func TestTheAnswerPerLease(t *testing.T) {
	t.Parallel()
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	reported := []runnerapi.HeldLease{
		{LeaseID: a.String(), Attempt: 2}, {LeaseID: b.String(), Attempt: 1}, {LeaseID: c.String(), Attempt: 1},
		{LeaseID: a.String(), Attempt: 1}, {LeaseID: "not a lease", Attempt: 1},
	}
	held := []store.HeldLease{{JobID: a, Attempt: 2}, {JobID: b, Attempt: 1, CancelRequested: true}}
	require.Equal(t, []runnerapi.LeaseAnswer{
		{LeaseID: a.String(), Attempt: 2, Action: runnerapi.LeaseContinue},
		{LeaseID: b.String(), Attempt: 1, Action: runnerapi.LeaseCancel},
		{LeaseID: c.String(), Attempt: 1, Action: runnerapi.LeaseGone},
		{LeaseID: a.String(), Attempt: 1, Action: runnerapi.LeaseGone},
		{LeaseID: "not a lease", Attempt: 1, Action: runnerapi.LeaseGone},
	}, fleet.AnswerLeases(reported, held))
	require.Empty(t, fleet.AnswerLeases(nil, held))
}
