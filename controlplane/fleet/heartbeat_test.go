package fleet_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// yard is a pool of an organisation of its own on the shared database,
// with an approved runner, and the heartbeats heard through a running
// writer.
type yard struct {
	st     *store.Store
	pool   record.Pool
	runner uuid.UUID
	beats  *fleet.Heartbeats
	// observed counts the latencies observed.
	observed int
	// logs is what the heartbeats logged.
	logs strings.Builder
}

func newYard(t *testing.T, poolLease *int) *yard {
	t.Helper()
	ctx := context.Background()
	st := store.New(storetest.SharedPool(t))
	org, err := st.CreateOrganisation(ctx, "org-"+uuid.NewString()[:8])
	require.NoError(t, err)
	y := &yard{st: st}
	y.pool, err = st.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu", LeaseSeconds: poolLease, Images: []string{"busybox"}})
	require.NoError(t, err)
	y.runner = storetest.ApprovedRunner(t, st, y.pool.ID, 8, 65536, 0)
	w := fleet.NewWriter(st, slog.New(slog.DiscardHandler), fleet.WriterOptions{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	y.beats = fleet.NewHeartbeats(st, w, fleet.HeartbeatsOptions{DefaultLeaseSeconds: 30,
		Latency: prometheus.ObserverFunc(func(float64) { y.observed++ }), Log: slog.New(slog.NewTextHandler(&y.logs, nil))})
	return y
}

func (y *yard) read(t *testing.T) record.Runner {
	t.Helper()
	r, err := y.st.Runner(context.Background(), record.AllOrganisations(), y.runner)
	require.NoError(t, err)
	return r
}

// beat sends req as the yard's runner, as last read.
func (y *yard) beat(t *testing.T, req runnerapi.HeartbeatRequest) (runnerapi.HeartbeatResponse, error) {
	t.Helper()
	if req.Capacity.Host.MemoryMiB == 0 {
		req.Capacity.Host = runnerapi.HostCapacity{Cores: 8, MemoryMiB: 65536}
	}
	return y.beats.Beat(context.Background(), y.read(t), req)
}

// leased submits a job to the yard's pool and leases it to its runner.
func (y *yard) leased(t *testing.T) record.Job {
	t.Helper()
	ctx := context.Background()
	_, _, err := y.st.SubmitJob(ctx, record.AllOrganisations(), store.NewJob{PoolID: y.pool.ID, Image: "busybox",
		Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"})
	require.NoError(t, err)
	room := record.Claim{Cores: 8, MemoryMiB: 65536}
	j, ok, err := y.st.ClaimJob(ctx, record.ClaimRequest{RunnerID: y.runner, Kinds: []string{"default"}, Free: room, Largest: room, DefaultLeaseSeconds: 30})
	require.NoError(t, err)
	require.True(t, ok)
	return j
}

func refused(t *testing.T, err error, code string) {
	t.Helper()
	var body *runnerapi.ErrorBody
	require.ErrorAs(t, err, &body)
	require.Equal(t, code, body.Code, body.Message)
}

// A heartbeat records the runner's report and health, extends the leases
// it holds and answers each, keeps its agent's recovery proof, and tells
// when to beat next (a third of the pool's lease) and the pool's images.
func TestAHeartbeatIsRecordedAndAnswered(t *testing.T) {
	t.Parallel()
	lease := 90
	y := newYard(t, &lease)
	held, cancelled := y.leased(t), y.leased(t)
	_, err := y.st.CancelJob(context.Background(), record.AllOrganisations(), cancelled.ID)
	require.NoError(t, err)
	agent := uuid.NewString()
	proof := &runnerapi.RecoveryProof{AgentInstance: agent, BootID: "b1", SurvivorsChecked: true, Isolated: true}
	health := []runnerapi.Condition{{Name: "podman", OK: true, Severity: "info", Title: "podman answers"}}
	before := time.Now()
	got, err := y.beat(t, runnerapi.HeartbeatRequest{AgentVersion: "1.4.0", Health: health, Recovery: proof, Leases: []runnerapi.HeldLease{
		{LeaseID: held.ID.String(), Attempt: 1, Phase: "RUNNING"}, {LeaseID: cancelled.ID.String(), Attempt: 1, Phase: "RUNNING"},
		{LeaseID: held.ID.String(), Attempt: 2, Phase: "RUNNING"}, {LeaseID: "not a lease", Attempt: 1, Phase: "RUNNING"},
	}})
	require.NoError(t, err)
	require.Equal(t, runnerapi.HeartbeatResponse{NextHeartbeatSeconds: 30, RecoveryRecorded: true, PoolImages: []string{"busybox"}, GPUFaults: []runnerapi.GPUFault{},
		Leases: []runnerapi.LeaseAnswer{
			{LeaseID: held.ID.String(), Attempt: 1, Action: runnerapi.LeaseContinue},
			{LeaseID: cancelled.ID.String(), Attempt: 1, Action: runnerapi.LeaseCancel},
			{LeaseID: held.ID.String(), Attempt: 2, Action: runnerapi.LeaseGone},
			{LeaseID: "not a lease", Attempt: 1, Action: runnerapi.LeaseGone},
		}}, got)
	require.Equal(t, 1, y.observed)
	r := y.read(t)
	require.Equal(t, "1.4.0", r.AgentVersion)
	require.Equal(t, health, r.Health)
	require.NotNil(t, r.LastHeartbeatAt)
	require.False(t, r.LastHeartbeatAt.Before(before.Add(-time.Second)))
	require.Equal(t, proof, r.Recovery)
	require.True(t, fleet.TakingWork(r, time.Now()))

	got, err = y.beat(t, runnerapi.HeartbeatRequest{AgentVersion: "1.4.0"})
	require.NoError(t, err)
	require.False(t, got.RecoveryRecorded, "no proof this time")
	require.Empty(t, got.Leases)
	require.Equal(t, []runnerapi.Condition{}, y.read(t).Health, "no conditions is an empty list")
	require.Equal(t, proof, y.read(t).Recovery, "the proof is kept")
}

// A runner whose report drifts from its approved inventory is quarantined
// by the heartbeat that shows it, and told so.
func TestDriftQuarantines(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	ctx := context.Background()
	require.NoError(t, y.st.SetInventory(ctx, y.runner, record.Inventory{MemoryMiB: 65536,
		GPUs: []record.InventoryGPU{{UUID: "GPU-a", MemoryTotalMiB: 81920}}}))
	gpu := runnerapi.GPU{UUID: "GPU-a", MemoryTotalMiB: 81920, Healthy: true}
	got, err := y.beat(t, runnerapi.HeartbeatRequest{Capacity: runnerapi.Capacity{GPUs: []runnerapi.GPU{gpu}}})
	require.NoError(t, err)
	require.False(t, got.Quarantined, "as approved")
	require.Equal(t, 10, got.NextHeartbeatSeconds, "a third of the default lease")

	require.NotContains(t, y.logs.String(), "runner quarantined")

	got, err = y.beat(t, runnerapi.HeartbeatRequest{})
	require.NoError(t, err)
	require.True(t, got.Quarantined)
	r := y.read(t)
	require.NotNil(t, r.QuarantinedAt)
	require.Equal(t, "inventory drift: GPU GPU-a is missing", r.QuarantineReason)
	require.False(t, fleet.TakingWork(r, time.Now()))
	require.Contains(t, y.logs.String(), "runner quarantined")
	got, err = y.beat(t, runnerapi.HeartbeatRequest{})
	require.NoError(t, err)
	require.True(t, got.Quarantined, "still")
	require.Equal(t, 1, strings.Count(y.logs.String(), "runner quarantined"), "said once:\n%s", y.logs.String())
}

// A fault a GPU reports is kept from the heartbeat that shows it, stamped
// with when the server recorded it, and answered; sent again it is the
// same fault, not a new one.
func TestAGPUFaultIsKept(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	seen := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	faulty := runnerapi.GPU{UUID: "GPU-a", MemoryTotalMiB: 81920, Fault: &runnerapi.GPUFault{UUID: "GPU-a", XID: 79, ObservedAt: seen}}
	req := runnerapi.HeartbeatRequest{Capacity: runnerapi.Capacity{GPUs: []runnerapi.GPU{faulty}}}
	got, err := y.beat(t, req)
	require.NoError(t, err)
	require.Len(t, got.GPUFaults, 1)
	require.Equal(t, 79, got.GPUFaults[0].XID)
	require.NotNil(t, got.GPUFaults[0].RecordedAt)
	recorded := *got.GPUFaults[0].RecordedAt
	got, err = y.beat(t, req)
	require.NoError(t, err)
	require.Len(t, got.GPUFaults, 1)
	require.True(t, recorded.Equal(*got.GPUFaults[0].RecordedAt), "the fault first recorded")
	require.Len(t, y.read(t).GPUFaults, 1)
}

// A heartbeat that could not be an agent's is refused before anything is
// recorded; one from a runner no longer approved is refused as not
// authenticated.
func TestAHeartbeatRefused(t *testing.T) {
	t.Parallel()
	y := newYard(t, nil)
	_, err := y.beat(t, runnerapi.HeartbeatRequest{RunnerID: uuid.NewString()})
	refused(t, err, runnerapi.CodeForbidden)
	_, err = y.beat(t, runnerapi.HeartbeatRequest{Health: []runnerapi.Condition{{Name: "x", Severity: "fatal"}}})
	refused(t, err, runnerapi.CodeBadRequest)
	require.Nil(t, y.read(t).LastHeartbeatAt, "nothing recorded")
	require.Zero(t, y.observed)

	require.NoError(t, y.st.WithTx(context.Background(), func(tx *store.Tx) error {
		ctx := context.Background()
		if _, err := tx.LockRunner(ctx, record.AllOrganisations(), y.runner); err != nil {
			return err
		}
		return tx.SetRunnerStatus(ctx, y.runner, store.RunnerDecision{Status: record.RunnerRevoked, Reason: "stolen"}, nil)
	}))
	_, err = y.beat(t, runnerapi.HeartbeatRequest{})
	refused(t, err, runnerapi.CodeUnauthenticated)

	// Not stored (here: the request ended first): the runner is told to
	// send it again.
	idle := fleet.NewHeartbeats(y.st, fleet.NewWriter(y.st, slog.New(slog.DiscardHandler), fleet.WriterOptions{}), fleet.HeartbeatsOptions{})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = idle.Beat(gone, record.Runner{ID: y.runner}, runnerapi.HeartbeatRequest{})
	refused(t, err, runnerapi.CodeRetry)
}
