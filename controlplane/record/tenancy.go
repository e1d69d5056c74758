package record

import (
	"time"

	"github.com/google/uuid"
)

// Admin is a person or program that holds admin tokens.
type Admin struct {
	ID             uuid.UUID
	Name           string
	Role           Role
	OrganisationID *uuid.UUID
	CreatedAt      time.Time
}

// Scope is what this admin may see.
func (a Admin) Scope() Scope {
	if a.Role == RolePlatformAdmin {
		return AllOrganisations()
	}
	if a.OrganisationID == nil {
		return Scope{}
	}
	return OneOrganisation(*a.OrganisationID)
}

// Organisation owns pools, runners and jobs.
type Organisation struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
}

// Pool is a compute pool. Nil settings mean "the server's default".
type Pool struct {
	ID                uuid.UUID
	OrganisationID    *uuid.UUID // nil: the platform's pool
	Name              string
	LeaseSeconds      *int
	QueueTimeoutHours *int
	// AllowUnenforcedMemory lets jobs that claim memory run on runners
	// that cannot hold them to it.
	AllowUnenforcedMemory bool
	CreatedAt             time.Time
}

// NewPool is a pool to create.
type NewPool struct {
	OrganisationID    *uuid.UUID // nil: a platform pool
	Name              string
	LeaseSeconds      *int
	QueueTimeoutHours *int
	// AllowUnenforcedMemory: see Pool.
	AllowUnenforcedMemory bool
}

// PoolFilter narrows a pool listing.
type PoolFilter struct {
	OrganisationID *uuid.UUID
	OnlyPlatform   bool
}

// AuditEntry records one admin action and how it ended.
type AuditEntry struct {
	ID             int64
	At             time.Time
	ActorID        *uuid.UUID
	ActorName      string
	ActorRole      Role
	OrganisationID *uuid.UUID
	Action         string
	Outcome        string
	Detail         []byte // JSON object
}
