package runnerhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/runnerapi"
)

// maxConditions bounds the health list a runner may send.
const maxConditions = 32

// heartbeat records a runner's capacity and health, quarantining it when
// its GPUs or memory fall short of what was approved. The answer comes only
// once the report is durable; a runner that gets an error sends again.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	c := callerFrom(r.Context())
	var req runnerapi.HeartbeatRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxHeartbeatBodyBytes) {
		return
	}
	if status, code, msg := checkHeartbeat(req, c.runner.ID.String()); status != 0 {
		writeError(w, status, code, msg)
		return
	}
	var proof []byte
	if req.Recovery != nil {
		proof, _ = json.Marshal(req.Recovery) // a struct of strings, ints and bools
	}
	rep, err := fleet.Report(req.Capacity)
	if err != nil {
		s.internal(w, r, "heartbeat", err)
		return
	}
	// The runner as cached may trail a fault just kept: the statement
	// keeps one fault per GPU whatever it is sent.
	newFaults := fleet.NewFaults(req.Capacity, runnerapi.Faulted(c.runner.GPUFaults), time.Now().UTC())
	health := req.Health
	if health == nil {
		health = []runnerapi.Condition{}
	}
	healthJSON, err := json.Marshal(health)
	if err != nil {
		s.internal(w, r, "heartbeat", err)
		return
	}
	drift := fleet.Drift(c.runner.Inventory, req.Capacity)
	out, err := s.o.Heartbeats.Submit(r.Context(), store.Heartbeat{
		RunnerID: c.runner.ID, AgentVersion: req.AgentVersion, Health: healthJSON, Drift: drift, ReportedCapacity: rep,
		NewGPUFaults: newFaults,
	})
	switch {
	case errors.Is(err, fleet.ErrNotRecorded):
		writeError(w, http.StatusUnauthorized, runnerapi.CodeUnauthenticated, "the runner is not approved")
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, runnerapi.CodeRetry, "the heartbeat was not stored; send it again")
		return
	}
	answers, err := s.answerLeases(r, c, req.Leases)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, runnerapi.CodeRetry, "the leases were not extended; send the heartbeat again")
		return
	}
	// After the leases: the proof counts the jobs the agent adopted, and
	// the server must have said CONTINUE to them first.
	if proof != nil {
		if err := s.o.Store.RecordRecovery(r.Context(), c.runner.ID, proof); err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, runnerapi.CodeRetry, "the recovery proof was not stored; send the heartbeat again")
			return
		}
		s.o.Log.Info("runner recovery proof", "runner_id", c.runner.ID, "agent_instance", req.Recovery.AgentInstance,
			"boot_id", req.Recovery.BootID, "survivors_found", req.Recovery.SurvivorsFound, "adopted", req.Recovery.Adopted, "isolated", req.Recovery.Isolated)
	}
	for _, f := range newFaults {
		s.o.Log.Warn("GPU out of service until cleared", "runner_id", c.runner.ID, "gpu_uuid", f.UUID, "evidence", f.Evidence())
	}
	if drift != "" && c.runner.QuarantinedAt == nil {
		s.o.Log.Warn("runner quarantined", "runner_id", c.runner.ID, "reason", drift)
	}
	if s.o.HeartbeatLatency != nil {
		s.o.HeartbeatLatency.Observe(time.Since(start).Seconds())
	}
	interval := runnerapi.Interval(fleet.LeaseSeconds(c.runner, s.o.DefaultLeaseSeconds))
	writeJSON(w, http.StatusOK, runnerapi.HeartbeatResponse{
		NextHeartbeatSeconds: int(interval / time.Second), Quarantined: out.Quarantined, Draining: out.Draining, Leases: answers,
		RecoveryRecorded: proof != nil, GPUFaults: out.GPUFaults, PoolImages: c.runner.PoolImages,
	})
}

// checkHeartbeat refuses a heartbeat that is not the certificate's
// runner's, or that reports what no agent could: the status, code and
// message of the answer, or a zero status.
func checkHeartbeat(req runnerapi.HeartbeatRequest, runnerID string) (int, string, string) {
	bad := func(msg string) (int, string, string) { return http.StatusBadRequest, runnerapi.CodeBadRequest, msg }
	if req.RunnerID != "" && req.RunnerID != runnerID {
		return http.StatusForbidden, runnerapi.CodeForbidden, "the heartbeat names another runner than the certificate"
	}
	if err := runnerapi.CheckCapacity(req.Capacity); err != nil {
		return bad("capacity: " + err.Error())
	}
	if len(req.Leases) > runnerapi.MaxHeldLeases {
		return bad(fmt.Sprintf("leases: at most %d", runnerapi.MaxHeldLeases))
	}
	for i, l := range req.Leases {
		if err := runnerapi.CheckAttempt(l.Attempt); err != nil {
			return bad(fmt.Sprintf("leases[%d]: %v", i, err))
		}
	}
	if err := checkConditions(req.Health); err != nil {
		return bad("health: " + err.Error())
	}
	if err := runnerapi.CheckText("agent_version", req.AgentVersion, 64); err != nil {
		return bad(err.Error())
	}
	if req.Recovery != nil {
		if err := runnerapi.CheckRecovery(*req.Recovery); err != nil {
			return bad("recovery: " + err.Error())
		}
	}
	return 0, "", ""
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
