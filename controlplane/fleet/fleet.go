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
	"github.com/runmesh/runmesh/runnerapi"
)

// Report turns a checked capacity report into what the store keeps.
func Report(c runnerapi.Capacity) (store.ReportedCapacity, error) {
	gpus := c.GPUs
	if gpus == nil {
		gpus = []runnerapi.GPU{}
	}
	c.GPUs = nil
	capJSON, err := json.Marshal(c)
	if err != nil {
		return store.ReportedCapacity{}, err
	}
	gpuJSON, err := json.Marshal(gpus)
	if err != nil {
		return store.ReportedCapacity{}, err
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

// Capacity reads back what Report stored.
func Capacity(r store.Runner) (runnerapi.Capacity, error) {
	var c runnerapi.Capacity
	if len(r.Capacity) > 0 {
		if err := json.Unmarshal(r.Capacity, &c); err != nil {
			return c, fmt.Errorf("runner %s capacity: %w", r.ID, err)
		}
	}
	gpus, err := GPUs(r)
	c.GPUs = gpus
	return c, err
}

// GPUs reads back the runner's GPUs.
func GPUs(r store.Runner) ([]runnerapi.GPU, error) {
	gpus := []runnerapi.GPU{}
	if len(r.GPUs) > 0 {
		if err := json.Unmarshal(r.GPUs, &gpus); err != nil {
			return nil, fmt.Errorf("runner %s gpus: %w", r.ID, err)
		}
	}
	return gpus, nil
}

// ParseRecovery reads a recovery proof as stored; ok is false before the
// runner's agent sent one (nil).
func ParseRecovery(raw []byte) (proof runnerapi.RecoveryProof, ok bool, err error) {
	if raw == nil {
		return proof, false, nil
	}
	if err := json.Unmarshal(raw, &proof); err != nil {
		return proof, false, fmt.Errorf("recovery proof: %w", err)
	}
	return proof, true, nil
}

// Inventory is what an administrator approved: the GPUs by UUID with their
// memory, and the host's memory.
type Inventory struct {
	GPUs      []InventoryGPU `json:"gpus"`
	MemoryMiB int64          `json:"memory_mib"`
}

// InventoryGPU is one approved GPU.
type InventoryGPU struct {
	UUID           string `json:"uuid"`
	MemoryTotalMiB int64  `json:"memory_total_mib"`
}

// InventoryOf is the inventory of a runner as it stands.
func InventoryOf(r store.Runner) ([]byte, error) {
	gpus, err := GPUs(r)
	if err != nil {
		return nil, err
	}
	inv := Inventory{MemoryMiB: r.MemoryMiB, GPUs: []InventoryGPU{}}
	for _, g := range gpus {
		inv.GPUs = append(inv.GPUs, InventoryGPU{UUID: g.UUID, MemoryTotalMiB: g.MemoryTotalMiB})
	}
	return json.Marshal(inv)
}

// ParseInventory reads a stored inventory (nil: none yet).
func ParseInventory(b []byte) (*Inventory, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var inv Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return nil, err
	}
	return &inv, nil
}

// hostMemoryTolerance absorbs the kernel's own small changes to MemTotal.
const hostMemoryTolerance = 0.02

// Drift compares a report with the approved inventory: a GPU gone, a GPU
// with less memory, a GPU that was never approved, or a host with less
// memory. It returns the differences as one sentence, or "" when there are
// none. An unapproved GPU is drift too: placement trusts what the runner
// reports, so the GPUs it may offer are the ones an administrator saw.
func Drift(inv *Inventory, c runnerapi.Capacity) string {
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

// LeaseSeconds is the lease in force for the runner's pool.
func LeaseSeconds(r store.Runner, defaultLeaseSeconds int) int {
	if r.PoolLeaseSeconds != nil {
		return *r.PoolLeaseSeconds
	}
	return defaultLeaseSeconds
}

// Online: the runner heartbeated within three heartbeat intervals (its
// pool's lease). Only a heartbeat makes a runner online; no admin control
// does.
func Online(r store.Runner, defaultLeaseSeconds int, now time.Time) bool {
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
func TakingWork(r store.Runner, now time.Time) bool {
	if r.Status != store.RunnerApproved || r.QuarantinedAt != nil || r.Draining || r.RetiredAt != nil {
		return false
	}
	// The proof is for the agent instance that sent it; whether a request
	// comes from that instance is the lease handler's check.
	if proof, ok, err := ParseRecovery(r.Recovery); !ok || err != nil || !proof.Proves(proof.AgentInstance) {
		return false
	}
	recent := func(t *time.Time) bool { return t != nil && now.Sub(*t) < recentActivity }
	return recent(r.LastWorkRequestAt) || recent(r.LastHeartbeatAt)
}

// ErrRetired: a retired runner does not come back.
var ErrRetired = errors.New("the runner is retired")
