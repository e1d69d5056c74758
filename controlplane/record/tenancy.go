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
	// TokenID is the token the admin authenticated with (or, for an admin
	// just made, its first token); uuid.Nil when the admin was read
	// otherwise (in a list, say).
	TokenID uuid.UUID
}

// AdminToken is one of an admin's bearer tokens, as stored: never the
// token, which only its digest stands for.
type AdminToken struct {
	ID         uuid.UUID
	AdminID    uuid.UUID
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time // to the minute
	RevokedAt  *time.Time
	RevokedBy  *uuid.UUID
}

// Live is whether the token still authenticates at now.
func (t AdminToken) Live(now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || t.ExpiresAt.After(now))
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
	// AllowNetwork lets its jobs ask for a network (JobOptions.Network).
	AllowNetwork bool
	// Images are what its runners pull before they take work: references,
	// each optionally pinned (REFERENCE@sha256:DIGEST). Never nil.
	Images    []string
	CreatedAt time.Time
}

// NewPool is a pool to create.
type NewPool struct {
	OrganisationID    *uuid.UUID // nil: a platform pool
	Name              string
	LeaseSeconds      *int
	QueueTimeoutHours *int
	// AllowUnenforcedMemory, AllowNetwork, Images: see Pool.
	AllowUnenforcedMemory bool
	AllowNetwork          bool
	Images                []string
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

// AuditFilter narrows the audit log: to one action, one actor.
type AuditFilter struct {
	Action  *string
	ActorID *uuid.UUID
}
