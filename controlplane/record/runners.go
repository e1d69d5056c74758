package record

import (
	"time"

	"github.com/google/uuid"
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
	RunnerCapacity
}

// RunnerCapacity is what the runner last reported, and the controls on it.
type RunnerCapacity struct {
	AgentVersion      string
	LastHeartbeatAt   *time.Time
	LastWorkRequestAt *time.Time
	Capacity          []byte // runnerapi.Capacity as JSON, without the GPUs
	GPUs              []byte // []runnerapi.GPU as JSON
	Health            []byte // []runnerapi.Condition as JSON
	Cores             float64
	MemoryMiB         int64
	GPUCount          int
	GPUsHealthy       int
	Inventory         []byte // the approved inventory as JSON (see fleet); nil before approval
	QuarantinedAt     *time.Time
	QuarantineReason  string
	Draining          bool
	RetiredAt         *time.Time
	FailuresInARow    int
	EnforcesLimits    bool
	// Recovery is the agent's latest recovery proof
	// (runnerapi.RecoveryProof as JSON; nil before one came).
	Recovery   []byte
	RecoveryAt *time.Time
}

// RunnerFilter narrows a runner listing.
type RunnerFilter struct {
	PoolID *uuid.UUID
	Status *RunnerStatus
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
}

// EnrolmentToken is a stored enrolment token (its digest, never the token).
type EnrolmentToken struct {
	ID        uuid.UUID
	PoolID    uuid.UUID
	ExpiresAt time.Time
}
