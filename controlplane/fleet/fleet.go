// Package fleet holds the rules about runners as a fleet: what a capacity
// report stores, the inventory an approval fixes and the drift that breaks
// it, when a runner counts as online and as taking work, the writer that
// turns many heartbeats into one statement, and the fleet as
// administrators see and steer it (Service).
package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Report turns a checked capacity report into what the store keeps. (A
// GPU the server holds a fault against is counted out of the healthy ones
// by the statement that stores a heartbeat, on the row it updates.)
func Report(c runnerapi.Capacity) (store.ReportedCapacity, error) {
	gpus := c.GPUs
	if gpus == nil {
		gpus = []runnerapi.GPU{}
	}
	c.GPUs = nil
	c.Labels = nameable(c.Labels)
	capJSON, err := json.Marshal(c)
	if err != nil {
		return store.ReportedCapacity{}, fmt.Errorf("encode capacity: %w", err)
	}
	gpuJSON, err := json.Marshal(gpus)
	if err != nil {
		return store.ReportedCapacity{}, fmt.Errorf("encode gpus: %w", err)
	}
	healthy := 0
	for _, g := range gpus {
		if g.Healthy {
			healthy++
		}
	}
	return store.ReportedCapacity{
		Capacity: capJSON, GPUs: gpuJSON, Cores: c.Host.Cores, MemoryMiB: c.Host.MemoryMiB,
		GPUCount: len(gpus), GPUsHealthy: healthy, EnforcesMemory: c.Limits != nil && c.Limits.Memory,
	}, nil
}

// nameable is labels with each detected value as one a selector can
// name. Agents make them so themselves; earlier ones reported the facts as
// found ("NVIDIA H200" for NVIDIA-H200), which no selector could match.
func nameable(labels []runnerapi.Label) []runnerapi.Label {
	out := make([]runnerapi.Label, len(labels))
	for i, l := range labels {
		if l.Source == runnerapi.LabelDetected {
			l.Value = runnerapi.AsLabelValue(l.Value)
		}
		out[i] = l
	}
	return out
}

// InventoryOf is the inventory of a runner as it stands: what an
// administrator approves.
func InventoryOf(r record.Runner) record.Inventory {
	inv := record.Inventory{MemoryMiB: r.MemoryMiB, GPUs: []record.InventoryGPU{}}
	for _, g := range r.Capacity.GPUs {
		inv.GPUs = append(inv.GPUs, record.InventoryGPU{UUID: g.UUID, MemoryTotalMiB: g.MemoryTotalMiB})
	}
	return inv
}

// hostMemoryTolerance absorbs the kernel's own small changes to MemTotal.
const hostMemoryTolerance = 0.02

// Drift compares a report with the approved inventory: a GPU gone, a GPU
// with less memory, a GPU that was never approved, or a host with less
// memory. It returns the differences as one sentence, or "" when there are
// none. An unapproved GPU is drift too: placement trusts what the runner
// reports, so the GPUs it may offer are the ones an administrator saw.
func Drift(inv *record.Inventory, c runnerapi.Capacity) string {
	if inv == nil {
		return ""
	}
	now := map[string]int64{}
	for _, g := range c.GPUs {
		now[g.UUID] = g.MemoryTotalMiB
	}
	var diffs []string
	approved := map[string]bool{}
	for _, g := range inv.GPUs {
		approved[g.UUID] = true
	}
	for _, g := range c.GPUs {
		if !approved[g.UUID] {
			diffs = append(diffs, fmt.Sprintf("GPU %s was not approved", g.UUID))
		}
	}
	for _, g := range inv.GPUs {
		mem, ok := now[g.UUID]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("GPU %s is missing", g.UUID))
		case mem < g.MemoryTotalMiB:
			diffs = append(diffs, fmt.Sprintf("GPU %s has %d MiB of memory, approved with %d MiB", g.UUID, mem, g.MemoryTotalMiB))
		}
	}
	if float64(c.Host.MemoryMiB) < float64(inv.MemoryMiB)*(1-hostMemoryTolerance) {
		diffs = append(diffs, fmt.Sprintf("host memory is %d MiB, approved with %d MiB", c.Host.MemoryMiB, inv.MemoryMiB))
	}
	if len(diffs) == 0 {
		return ""
	}
	sort.Strings(diffs)
	return "inventory drift: " + strings.Join(diffs, "; ")
}

// NewFaults are the faults a report shows of GPUs the server holds none
// against (held), stamped with now as when the server recorded them.
func NewFaults(c runnerapi.Capacity, held map[string]runnerapi.GPUFault, now time.Time) []runnerapi.GPUFault {
	var out []runnerapi.GPUFault
	for _, g := range c.GPUs {
		if _, known := held[g.UUID]; g.Fault == nil || known {
			continue
		}
		f := *g.Fault
		f.RecordedAt = &now
		out = append(out, f)
	}
	return out
}

// LeaseSeconds is the lease in force for the runner's pool.
func LeaseSeconds(r record.Runner, defaultLeaseSeconds int) int {
	if r.PoolLeaseSeconds != nil {
		return *r.PoolLeaseSeconds
	}
	return defaultLeaseSeconds
}

// Online: the runner heartbeated within three heartbeat intervals (its
// pool's lease). Only a heartbeat makes a runner online; no admin control
// does.
func Online(r record.Runner, defaultLeaseSeconds int, now time.Time) bool {
	if r.LastHeartbeatAt == nil {
		return false
	}
	stale := 3 * runnerapi.Interval(LeaseSeconds(r, defaultLeaseSeconds))
	return now.Sub(*r.LastHeartbeatAt) < stale
}

// recentActivity is how recently a runner must have heartbeated or asked
// for work to count as taking work.
const recentActivity = 3 * time.Minute

// TakingWork: approved, not quarantined, not draining or retired, its
// agent's survivor check proved it isolated (an agent without a job
// runtime sends none), and it asked for work or heartbeated within the
// last three minutes.
func TakingWork(r record.Runner, now time.Time) bool {
	if r.Status != record.RunnerApproved || r.QuarantinedAt != nil || r.Draining || r.RetiredAt != nil {
		return false
	}
	// The proof is for the agent instance that sent it; whether a request
	// comes from that instance is the lease handler's check.
	if r.Recovery == nil || !r.Recovery.Proves(r.Recovery.AgentInstance) {
		return false
	}
	recent := func(t *time.Time) bool { return t != nil && now.Sub(*t) < recentActivity }
	return recent(r.LastWorkRequestAt) || recent(r.LastHeartbeatAt)
}

// ErrRetired: a retired runner does not come back.
var ErrRetired = errors.New("the runner is retired")
