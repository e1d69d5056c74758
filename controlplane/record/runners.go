package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/runnerapi"
)

// RunnerStatus is where a runner stands with the administrators.
type RunnerStatus string

const (
	RunnerPending  RunnerStatus = "PENDING"
	RunnerApproved RunnerStatus = "APPROVED"
	RunnerRejected RunnerStatus = "REJECTED"
	RunnerRevoked  RunnerStatus = "REVOKED"
)

// Runner is an enrolled machine.
type Runner struct {
	ID             uuid.UUID
	PoolID         uuid.UUID
	OrganisationID *uuid.UUID // the pool's; nil for a platform pool
	Name           string
	Status         RunnerStatus
	StatusReason   string
	PublicKey      []byte
	Fingerprint    string
	CSR            []byte // DER
	EnrolledAt     time.Time
	DecidedAt      *time.Time
	DecidedBy      *uuid.UUID

	// PoolLeaseSeconds is the pool's own lease setting (nil: the default).
	PoolLeaseSeconds *int
	// PoolImages are the pool's images (Pool.Images): its heartbeat
	// answers name them.
	PoolImages []string
	RunnerCapacity
}

// RunnerCapacity is what the runner last reported, and the controls on it.
// The reports are the runner API's own types: they are what the runner
// sent, checked, and a copy of them here would only have to be kept in
// step with the wire.
type RunnerCapacity struct {
	AgentVersion      string
	LastHeartbeatAt   *time.Time
	LastWorkRequestAt *time.Time
	// Capacity is the last report, its GPUs included (an empty list, not
	// nil, when it has none).
	Capacity runnerapi.Capacity
	// Health is the conditions of the last heartbeat (empty, not nil,
	// before one).
	Health           []runnerapi.Condition
	Cores            float64
	MemoryMiB        int64
	GPUCount         int
	GPUsHealthy      int
	Inventory        *Inventory // nil before approval
	QuarantinedAt    *time.Time
	QuarantineReason string
	Draining         bool
	RetiredAt        *time.Time
	FailuresInARow   int
	EnforcesLimits   bool
	// GPUFaults are the faults the server holds against the runner's GPUs
	// (never nil): each such GPU is out of placement until cleared.
	GPUFaults []runnerapi.GPUFault
	// Kinds are the job kinds it asked for last (nil before it asked).
	Kinds []string
	// Recovery is the agent's latest recovery proof (nil before one came).
	Recovery   *runnerapi.RecoveryProof
	RecoveryAt *time.Time
}

// Inventory is what an administrator approved, and what later heartbeats
// are held to (see fleet.Drift): the GPUs by UUID with their memory, and
// the host's memory. The tags are its stored form.
type Inventory struct {
	GPUs      []InventoryGPU `json:"gpus"`
	MemoryMiB int64          `json:"memory_mib"`
}

// InventoryGPU is one approved GPU.
type InventoryGPU struct {
	UUID           string `json:"uuid"`
	MemoryTotalMiB int64  `json:"memory_total_mib"`
}

// RunnerFilter narrows a runner listing.
type RunnerFilter struct {
	PoolID *uuid.UUID
	Status *RunnerStatus
	// LabelKey, with LabelValue or any value when that is nil: a label the
	// runner reported.
	LabelKey, LabelValue *string
}

// Booking is what a runner's jobs and holds take.
type Booking struct {
	Cores     float64
	MemoryMiB int64
	GPUs      int
	HeldGPUs  int
}

// Certificate is an issued certificate, as stored.
type Certificate struct {
	Serial    string // decimal
	RunnerID  *uuid.UUID
	DER       []byte
	NotBefore time.Time
	NotAfter  time.Time
	IssuedAt  time.Time
	// RevokedAt and RevocationReason: this serial was revoked on its own
	// (step ca revoke), whatever its runner's standing.
	RevokedAt        *time.Time
	RevocationReason *string
}

// EnrolmentToken is a stored enrolment token (its digest, never the token).
type EnrolmentToken struct {
	ID        uuid.UUID
	PoolID    uuid.UUID
	ExpiresAt time.Time
	// What a listing adds.
	OrganisationID *uuid.UUID // the pool's; nil for a platform pool
	CreatedBy      *uuid.UUID
	CreatedAt      time.Time
	UsedAt         *time.Time
	RunnerID       *uuid.UUID // the runner that enrolled with it
	RevokedAt      *time.Time
	RevokedBy      *uuid.UUID
}

// EnrolmentTokenState is where an enrolment token stands.
type EnrolmentTokenState string

// Enrolment token states.
const (
	TokenLive    EnrolmentTokenState = "LIVE" // a runner may enrol with it now
	TokenUsed    EnrolmentTokenState = "USED"
	TokenExpired EnrolmentTokenState = "EXPIRED"
	TokenRevoked EnrolmentTokenState = "REVOKED"
)

// State is where the token stands at now.
func (t EnrolmentToken) State(now time.Time) EnrolmentTokenState {
	switch {
	case t.UsedAt != nil:
		return TokenUsed
	case t.RevokedAt != nil:
		return TokenRevoked
	case !t.ExpiresAt.After(now):
		return TokenExpired
	}
	return TokenLive
}

// EnrolmentTokenFilter narrows a listing of enrolment tokens.
type EnrolmentTokenFilter struct {
	PoolID *uuid.UUID
	State  *EnrolmentTokenState
}
