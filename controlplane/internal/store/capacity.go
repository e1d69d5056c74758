package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// ReportedCapacity is one capacity report, ready to store: the JSON
// documents as the runner sent them, and the figures placement and metrics
// need as columns.
type ReportedCapacity struct {
	Capacity    json.RawMessage `json:"capacity"` // without the GPUs
	GPUs        json.RawMessage `json:"gpus"`
	Cores       float64         `json:"cores"`
	MemoryMiB   int64           `json:"memory_mib"`
	GPUCount    int             `json:"gpu_count"`
	GPUsHealthy int             `json:"gpus_healthy"`
	// EnforcesMemory: the runner holds a job to its memory claim. Only
	// such runners get jobs that claim memory, unless their pool allows.
	EnforcesMemory bool `json:"enforces_memory"`
}

// SetEnrolmentCapacity records what a runner reported when it enrolled:
// what the administrator sees before approving.
func (s *Querier) SetEnrolmentCapacity(ctx context.Context, id uuid.UUID, c ReportedCapacity) error {
	return mapErr(s.q.SetRunnerCapacity(ctx, s.db, dbsqlc.SetRunnerCapacityParams{
		ID: id, Capacity: c.Capacity, Gpus: c.GPUs, Cores: c.Cores, MemoryMib: c.MemoryMiB,
		GpuCount: int32(c.GPUCount), GpusHealthy: int32(c.GPUsHealthy), EnforcesMemory: c.EnforcesMemory,
	}))
}

// SetInventory stores what later heartbeats are held to. Like the other
// writes of a runner's standing below, it tells every replica that the
// runner changed once committed.
func (s *Querier) SetInventory(ctx context.Context, id uuid.UUID, inventory record.Inventory) error {
	doc, err := json.Marshal(inventory)
	if err != nil {
		return fmt.Errorf("set inventory: %w", err)
	}
	if err := s.q.SetRunnerInventory(ctx, s.db, dbsqlc.SetRunnerInventoryParams{ID: id, Inventory: doc}); err != nil {
		return mapErr(err)
	}
	s.runnerChanged(ChannelRunnerStatus, id.String())
	return nil
}

// Heartbeat is one runner's report, for RecordHeartbeats.
type Heartbeat struct {
	RunnerID     uuid.UUID       `json:"id"`
	AgentVersion string          `json:"agent_version"`
	Health       json.RawMessage `json:"health"`
	// Drift, when not empty, quarantines the runner with it as the reason.
	Drift string `json:"drift"`
	// NewGPUFaults are faults of GPUs the runner had none recorded for;
	// they are kept (one per GPU) and every replica told.
	NewGPUFaults []runnerapi.GPUFault `json:"new_gpu_faults,omitempty"`
	ReportedCapacity
}

// HeartbeatOutcome is what storing a heartbeat left the runner as.
type HeartbeatOutcome struct {
	Quarantined bool
	Draining    bool
	// GPUFaults are the faults held against the runner's GPUs, this
	// beat's new ones included.
	GPUFaults []runnerapi.GPUFault
}

// RecordHeartbeats stores a batch of heartbeats in one statement (and one
// more for each runner it quarantined or found a GPU fault on, whose wait
// for work it ends). Runners that are not approved any more are left out
// of the result: their heartbeats are not recorded.
func (s *Querier) RecordHeartbeats(ctx context.Context, beats []Heartbeat, now *time.Time) (map[uuid.UUID]HeartbeatOutcome, error) {
	doc, err := json.Marshal(beats)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.RecordHeartbeats(ctx, s.db, dbsqlc.RecordHeartbeatsParams{Beats: doc, Now: now})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]HeartbeatOutcome, len(rows))
	for _, r := range rows {
		o := HeartbeatOutcome{Quarantined: r.Quarantined, Draining: r.Draining}
		if err := decodeDocument(r.GpuFaults, &o.GPUFaults); err != nil {
			return nil, fmt.Errorf("read runner %s: stored gpu faults: %w", r.ID, err)
		}
		out[r.ID] = o
		if r.Changed {
			// Quarantined, or a GPU out of placement: whatever room it
			// waits with is not what it had. (Rare: most batches cost no
			// statement here.) On the pool, as the heartbeat writer calls
			// it, the heartbeats are stored whatever this answers: a wait
			// left in place ends by itself, within a long poll, and
			// claims pass over a quarantined runner's. (In a transaction
			// a failure here would fail it, as any statement's would.)
			_ = s.StopWaiting(ctx, r.ID)
		}
	}
	return out, nil
}

// ClearGPUFault drops the fault held against one of a runner's GPUs, and
// tells every replica. ErrNotFound: the GPU has none.
func (s *Querier) ClearGPUFault(ctx context.Context, id uuid.UUID, gpuUUID string) error {
	n, err := s.q.ClearGPUFault(ctx, s.db, dbsqlc.ClearGPUFaultParams{ID: id, GpuUuid: gpuUUID})
	if err != nil {
		return mapErr(err)
	}
	if n == 0 {
		return record.ErrNotFound
	}
	s.runnerChanged(ChannelRunnerStatus, id.String())
	return nil
}

// SetDraining drains a runner (no new work) or lets it take work again.
// A drained runner waits for work no longer.
func (s *Querier) SetDraining(ctx context.Context, id uuid.UUID, draining bool) error {
	return s.atomically(ctx, func(tx *Tx) error {
		if err := tx.q.SetRunnerDraining(ctx, tx.db, dbsqlc.SetRunnerDrainingParams{ID: id, Draining: draining}); err != nil {
			return mapErr(err)
		}
		tx.runnerChanged(ChannelRunnerStatus, id.String())
		if draining {
			return tx.StopWaiting(ctx, id)
		}
		return nil
	})
}

// Retire marks a runner retired (and draining); it waits for work no
// longer.
func (s *Querier) Retire(ctx context.Context, id uuid.UUID) error {
	return s.atomically(ctx, func(tx *Tx) error {
		if err := tx.q.RetireRunner(ctx, tx.db, id); err != nil {
			return mapErr(err)
		}
		tx.runnerChanged(ChannelRunnerStatus, id.String())
		return tx.StopWaiting(ctx, id)
	})
}

// ClearQuarantine lifts a quarantine, taking inventory as the new baseline.
func (s *Querier) ClearQuarantine(ctx context.Context, id uuid.UUID, inventory record.Inventory) error {
	doc, err := json.Marshal(inventory)
	if err != nil {
		return fmt.Errorf("clear quarantine: %w", err)
	}
	if err := s.q.ClearQuarantine(ctx, s.db, dbsqlc.ClearQuarantineParams{ID: id, Inventory: doc}); err != nil {
		return mapErr(err)
	}
	s.runnerChanged(ChannelRunnerStatus, id.String())
	return nil
}

// FleetCount is one group of runners for /metrics.
type FleetCount struct {
	Status      record.RunnerStatus
	Online      bool
	Runners     int64
	GPUs        int64
	GPUsHealthy int64
}

// FleetCounts groups every runner by status and online-ness.
func (s *Querier) FleetCounts(ctx context.Context, defaultLeaseSeconds int) ([]FleetCount, error) {
	rows, err := s.q.FleetCounts(ctx, s.db, int32(defaultLeaseSeconds))
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]FleetCount, len(rows))
	for i, r := range rows {
		out[i] = FleetCount{Status: record.RunnerStatus(r.Status), Online: r.Online, Runners: r.Runners, GPUs: r.Gpus, GPUsHealthy: r.GpusHealthy}
	}
	return out, nil
}

// RunnerSeen is the newest heartbeat in each of the pools (for
// dataloaders); pools never heartbeated in are absent.
func (s *Querier) RunnerSeen(ctx context.Context, poolIDs []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	rows, err := s.q.PoolsRunnerSeen(ctx, s.db, poolIDs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]time.Time, len(rows))
	for _, r := range rows {
		out[r.PoolID] = r.Seen
	}
	return out, nil
}
