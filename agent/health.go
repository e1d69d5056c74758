package agent

import (
	"sync"

	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// Condition names, as the heartbeat carries them to the control plane.
const (
	condHeartbeat   = "heartbeat"
	condRuntime     = "runtime"
	condSurvivors   = "survivor_check"
	condCertificate = "certificate"
	condGPU         = "gpu"
	condNVML        = "nvml"
	condRenewal     = "renewal"
	condDraining    = "draining"
	condQuarantined = "quarantined"
)

// agentHealth is the agent's conditions, each registered once in the
// process's registry. The parts that know the answer set them: the
// heartbeat loop (heartbeat, nvml, gpu), the runtime probe (runtime), the
// survivor check, renewal (certificate, renewal), the lifecycle and the
// control plane's answers (draining, quarantined). The heartbeat and
// sd_notify STATUS= both read the registry, so they never disagree.
type agentHealth struct {
	reg         *health.Registry
	heartbeat   *health.Condition
	runtime     *health.Condition
	survivors   *health.Condition
	certificate *health.Condition
	gpu         *health.Condition
	nvml        *health.Condition
	renewal     *health.Condition
	draining    *health.Condition
	quarantined *health.Condition

	mu sync.Mutex // guards stopping and drainedBy: the draining condition says both
	// stopping: a stop signal drains the agent; drainedBy: the control
	// plane drains the runner.
	stopping, drainedBy bool
}

func newAgentHealth(reg *health.Registry) *agentHealth {
	h := &agentHealth{
		reg: reg,
		// Registration order is the order the heartbeat lists them in.
		heartbeat:   reg.Register(condHeartbeat, "heartbeats answered by the control plane", health.Error),
		runtime:     reg.Register(condRuntime, "job runtime", health.Error),
		survivors:   reg.Register(condSurvivors, "survivor check", health.Error),
		certificate: reg.Register(condCertificate, "runner certificate", health.Error),
		gpu:         reg.Register(condGPU, "GPU health (XID and ECC events)", health.Error),
		nvml:        reg.Register(condNVML, "GPU measurement (NVML)", health.Warning),
		renewal:     reg.Register(condRenewal, "certificate renewal", health.Warning),
		draining:    reg.Register(condDraining, "drain", health.Info),
		quarantined: reg.Register(condQuarantined, "quarantine", health.Info),
	}
	// Nothing drains a process that has just started; whether the control
	// plane does, its first answer says.
	h.draining.SetHealthy("not draining")
	return h
}

// stop records a stop signal's drain.
func (h *agentHealth) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopping = true
	h.setDrainingLocked()
}

// answered records what the control plane's answer to a heartbeat says
// about the runner.
func (h *agentHealth) answered(resp runnerapi.HeartbeatResponse) {
	if resp.Quarantined {
		h.quarantined.SetUnhealthy("the control plane quarantined this runner: no new work until an administrator clears it")
	} else {
		h.quarantined.SetHealthy("not quarantined")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drainedBy = resp.Draining
	h.setDrainingLocked()
}

func (h *agentHealth) setDrainingLocked() {
	switch {
	case h.stopping:
		h.draining.SetUnhealthy("stopping: no new work; the agent exits once its jobs end (a second signal exits now; the jobs go on)")
	case h.drainedBy:
		h.draining.SetUnhealthy("the control plane drains this runner: no new work")
	default:
		h.draining.SetHealthy("not draining")
	}
}
