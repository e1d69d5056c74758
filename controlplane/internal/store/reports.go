package store

import (
	"encoding/json"
	"fmt"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// The store keeps what a runner reports as JSON documents (the heartbeat
// path encodes them in its handlers, which run side by side, so that the
// writer's one statement a batch only copies them), and hands them back
// decoded: nothing above the store reads a runner's columns as JSON. A
// document that does not decode is an error of the read, naming the runner
// and the column, never a zero value passed off as the runner's report.

// runnerReports decodes the documents of a runner row into what record
// keeps of them; everything else of the row is copied as it is.
func runnerReports(r dbsqlc.Runner) (record.RunnerCapacity, error) {
	c := record.RunnerCapacity{
		AgentVersion: r.AgentVersion, LastHeartbeatAt: r.LastHeartbeatAt, LastWorkRequestAt: r.LastWorkRequestAt,
		Cores: r.Cores, MemoryMiB: r.MemoryMib, GPUCount: int(r.GpuCount), GPUsHealthy: int(r.GpusHealthy),
		QuarantinedAt: r.QuarantinedAt, QuarantineReason: r.QuarantineReason, Draining: r.Draining, RetiredAt: r.RetiredAt,
		FailuresInARow: int(r.FailuresInARow), EnforcesLimits: r.EnforcesLimits, RecoveryAt: r.RecoveryAt, Kinds: r.Kinds,
	}
	if err := decodeDocument(r.Capacity, &c.Capacity); err != nil {
		return c, fmt.Errorf("read runner %s: stored capacity: %w", r.ID, err)
	}
	// The GPUs have a column of their own (metrics and placement count
	// them); the capacity document is stored without them.
	c.Capacity.GPUs = []runnerapi.GPU{}
	if err := decodeDocument(r.Gpus, &c.Capacity.GPUs); err != nil {
		return c, fmt.Errorf("read runner %s: stored gpus: %w", r.ID, err)
	}
	c.Health = []runnerapi.Condition{}
	if err := decodeDocument(r.Health, &c.Health); err != nil {
		return c, fmt.Errorf("read runner %s: stored health: %w", r.ID, err)
	}
	c.GPUFaults = []runnerapi.GPUFault{}
	if err := decodeDocument(r.GpuFaults, &c.GPUFaults); err != nil {
		return c, fmt.Errorf("read runner %s: stored gpu faults: %w", r.ID, err)
	}
	var err error
	if c.Inventory, err = decodeOptional[record.Inventory](r.Inventory); err != nil {
		return c, fmt.Errorf("read runner %s: stored inventory: %w", r.ID, err)
	}
	if c.Recovery, err = decodeOptional[runnerapi.RecoveryProof](r.Recovery); err != nil {
		return c, fmt.Errorf("read runner %s: stored recovery proof: %w", r.ID, err)
	}
	// A JSON null decodes to a nil list; the lists are never nil.
	if c.Capacity.GPUs == nil {
		c.Capacity.GPUs = []runnerapi.GPU{}
	}
	if c.Health == nil {
		c.Health = []runnerapi.Condition{}
	}
	if c.GPUFaults == nil {
		c.GPUFaults = []runnerapi.GPUFault{}
	}
	return c, nil
}

// decodeDocument decodes a document that every runner has (its column has
// a default); an empty one leaves v as it is.
func decodeDocument(doc []byte, v any) error {
	if len(doc) == 0 {
		return nil
	}
	return json.Unmarshal(doc, v)
}

// decodeOptional decodes a document that a runner may not have yet (SQL
// NULL, or a JSON null): nil.
func decodeOptional[T any](doc []byte) (*T, error) {
	var v *T
	if len(doc) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	return v, nil
}
