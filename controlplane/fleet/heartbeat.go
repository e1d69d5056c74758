package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Heartbeats is what a runner's heartbeat means: its capacity and health
// recorded (through the Writer, many runners a statement), the GPU faults
// it shows kept, the drift from its approved inventory that quarantines
// it, its leases extended and answered one by one, and its agent's
// recovery proof kept. The answer comes only once all of it is durable;
// a runner that gets an error sends the heartbeat again.
type Heartbeats struct {
	st     *store.Store
	writer *Writer
	log    *slog.Logger
	// defaultLeaseSeconds is the lease of pools without their own.
	defaultLeaseSeconds int
	latency             prometheus.Observer
}

// HeartbeatsOptions are what Heartbeats works with.
type HeartbeatsOptions struct {
	// DefaultLeaseSeconds is the lease of pools without their own; a
	// runner heartbeats every third of its pool's.
	DefaultLeaseSeconds int
	// Latency observes how long each heartbeat took, storage included,
	// if set.
	Latency prometheus.Observer
	Log     *slog.Logger
}

// NewHeartbeats hears heartbeats into st, their reports written by w.
func NewHeartbeats(st *store.Store, w *Writer, o HeartbeatsOptions) *Heartbeats {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Heartbeats{st: st, writer: w, log: o.Log.With("component", "heartbeats"),
		defaultLeaseSeconds: o.DefaultLeaseSeconds, latency: o.Latency}
}

// Errors a heartbeat may end with, besides a refusal of what it says: the
// runner is to send it again (runnerapi.CodeRetry).
var (
	errBeatNotStored     = runnerapi.Refuse(runnerapi.CodeRetry, "the heartbeat was not stored; send it again")
	errLeasesNotExtended = runnerapi.Refuse(runnerapi.CodeRetry, "the leases were not extended; send the heartbeat again")
	errProofNotStored    = runnerapi.Refuse(runnerapi.CodeRetry, "the recovery proof was not stored; send the heartbeat again")
	errNotApproved       = runnerapi.Refuse(runnerapi.CodeUnauthenticated, "the runner is not approved")
)

// Beat hears one heartbeat of runner (as its certificate named it, read
// recently) and answers it.
func (h *Heartbeats) Beat(ctx context.Context, runner record.Runner, req runnerapi.HeartbeatRequest) (runnerapi.HeartbeatResponse, error) {
	start := time.Now()
	if err := CheckHeartbeat(req, runner.ID.String()); err != nil {
		return runnerapi.HeartbeatResponse{}, err
	}
	beat, newFaults, err := h.record(runner, req, start.UTC())
	if err != nil {
		return runnerapi.HeartbeatResponse{}, err
	}
	out, err := h.writer.Submit(ctx, beat)
	switch {
	case errors.Is(err, ErrNotRecorded):
		return runnerapi.HeartbeatResponse{}, errNotApproved
	case err != nil:
		return runnerapi.HeartbeatResponse{}, errBeatNotStored
	}
	leaseSeconds := LeaseSeconds(runner, h.defaultLeaseSeconds)
	answers, err := h.answerLeases(ctx, runner.ID, leaseSeconds, req.Leases)
	if err != nil {
		return runnerapi.HeartbeatResponse{}, errLeasesNotExtended
	}
	// After the leases: the proof counts the jobs the agent adopted, and
	// the server must have said CONTINUE to them first.
	if req.Recovery != nil {
		proof, _ := json.Marshal(req.Recovery) // a struct of strings, ints and bools
		if err := h.st.RecordRecovery(ctx, runner.ID, proof); err != nil {
			return runnerapi.HeartbeatResponse{}, errProofNotStored
		}
		h.log.Info("runner recovery proof", "runner_id", runner.ID, "agent_instance", req.Recovery.AgentInstance,
			"boot_id", req.Recovery.BootID, "survivors_found", req.Recovery.SurvivorsFound, "adopted", req.Recovery.Adopted, "isolated", req.Recovery.Isolated)
	}
	for _, f := range newFaults {
		h.log.Warn("GPU out of service until cleared", "runner_id", runner.ID, "gpu_uuid", f.UUID, "evidence", f.Evidence())
	}
	if beat.Drift != "" && runner.QuarantinedAt == nil {
		h.log.Warn("runner quarantined", "runner_id", runner.ID, "reason", beat.Drift)
	}
	if h.latency != nil {
		h.latency.Observe(time.Since(start).Seconds())
	}
	return runnerapi.HeartbeatResponse{
		NextHeartbeatSeconds: int(runnerapi.Interval(leaseSeconds) / time.Second), Quarantined: out.Quarantined,
		Draining: out.Draining, Leases: answers, RecoveryRecorded: req.Recovery != nil, GPUFaults: out.GPUFaults,
		PoolImages: runner.PoolImages,
	}, nil
}

// record is what the store keeps of a heartbeat heard at now: its report,
// the drift from the approved inventory (which quarantines the runner),
// and the faults it shows of GPUs the server holds none against, which
// it also returns.
func (h *Heartbeats) record(runner record.Runner, req runnerapi.HeartbeatRequest, now time.Time) (store.Heartbeat, []runnerapi.GPUFault, error) {
	rep, err := Report(req.Capacity)
	if err != nil {
		return store.Heartbeat{}, nil, err
	}
	health := req.Health
	if health == nil {
		health = []runnerapi.Condition{}
	}
	healthJSON, err := json.Marshal(health)
	if err != nil {
		return store.Heartbeat{}, nil, fmt.Errorf("encode health: %w", err)
	}
	// The runner as cached may trail a fault just kept: the statement
	// keeps one fault per GPU whatever it is sent.
	newFaults := NewFaults(req.Capacity, runnerapi.Faulted(runner.GPUFaults), now)
	return store.Heartbeat{
		RunnerID: runner.ID, AgentVersion: req.AgentVersion, Health: healthJSON, Drift: Drift(runner.Inventory, req.Capacity),
		ReportedCapacity: rep, NewGPUFaults: newFaults,
	}, newFaults, nil
}

// answerLeases extends the leases a heartbeat reports and answers each.
func (h *Heartbeats) answerLeases(ctx context.Context, runnerID uuid.UUID, leaseSeconds int, reported []runnerapi.HeldLease) ([]runnerapi.LeaseAnswer, error) {
	if len(reported) == 0 {
		return nil, nil
	}
	reports := make([]store.LeaseReport, 0, len(reported))
	for _, l := range reported {
		id, err := uuid.Parse(l.LeaseID)
		if err != nil {
			continue // not a lease of ours: GONE
		}
		reports = append(reports, store.LeaseReport{LeaseID: id, Attempt: l.Attempt, Phase: l.Phase})
	}
	held, err := h.st.ExtendLeases(ctx, runnerID, leaseSeconds, reports)
	if err != nil {
		return nil, err
	}
	return AnswerLeases(reported, held), nil
}

// AnswerLeases says, of each lease a heartbeat reported, what the runner
// is to do with it, given the leases it still holds (as extended):
// CONTINUE one it holds at exactly that attempt, CANCEL one whose job was
// asked to stop, and GONE anything else (another attempt, a lease it no
// longer holds, an id that names no lease).
func AnswerLeases(reported []runnerapi.HeldLease, held []store.HeldLease) []runnerapi.LeaseAnswer {
	type key struct {
		id      string
		attempt int
	}
	still := make(map[key]store.HeldLease, len(held))
	for _, h := range held {
		still[key{h.JobID.String(), h.Attempt}] = h
	}
	out := make([]runnerapi.LeaseAnswer, 0, len(reported))
	for _, l := range reported {
		a := runnerapi.LeaseAnswer{LeaseID: l.LeaseID, Attempt: l.Attempt, Action: runnerapi.LeaseGone}
		if h, ok := still[key{l.LeaseID, l.Attempt}]; ok {
			a.Action = runnerapi.LeaseContinue
			if h.CancelRequested {
				a.Action = runnerapi.LeaseCancel
			}
		}
		out = append(out, a)
	}
	return out
}

// maxConditions bounds the health list a runner may send.
const maxConditions = 32

// CheckHeartbeat refuses a heartbeat that is not the certificate's
// runner's (forbidden), or that reports what no agent could (bad
// request).
func CheckHeartbeat(req runnerapi.HeartbeatRequest, runnerID string) error {
	bad := func(format string, args ...any) error {
		return runnerapi.Refuse(runnerapi.CodeBadRequest, format, args...)
	}
	if req.RunnerID != "" && req.RunnerID != runnerID {
		return runnerapi.Refuse(runnerapi.CodeForbidden, "the heartbeat names another runner than the certificate")
	}
	if err := runnerapi.CheckCapacity(req.Capacity); err != nil {
		return bad("capacity: %v", err)
	}
	if len(req.Leases) > runnerapi.MaxHeldLeases {
		return bad("leases: at most %d", runnerapi.MaxHeldLeases)
	}
	for i, l := range req.Leases {
		if err := runnerapi.CheckAttempt(l.Attempt); err != nil {
			return bad("leases[%d]: %v", i, err)
		}
	}
	if err := checkConditions(req.Health); err != nil {
		return bad("health: %v", err)
	}
	if err := runnerapi.CheckText("agent_version", req.AgentVersion, 64); err != nil {
		return bad("%v", err)
	}
	if req.Recovery != nil {
		if err := runnerapi.CheckRecovery(*req.Recovery); err != nil {
			return bad("recovery: %v", err)
		}
	}
	return nil
}

func checkConditions(cs []runnerapi.Condition) error {
	if len(cs) > maxConditions {
		return errors.New("too many conditions")
	}
	for _, c := range cs {
		if c.Name == "" {
			return errors.New("a condition needs a name")
		}
		if err := runnerapi.CheckText("name", c.Name, 64); err != nil {
			return err
		}
		if err := runnerapi.CheckText("title", c.Title, 512); err != nil {
			return err
		}
		switch c.Severity {
		case "info", "warning", "error":
		default:
			return errors.New("severity is info, warning or error")
		}
	}
	return nil
}
