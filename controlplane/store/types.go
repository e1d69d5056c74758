package store

import (
	"time"

	"github.com/google/uuid"
)

// Role is what an admin may do. Platform admins act everywhere; the others
// only inside their own organisation.
type Role string

const (
	RolePlatformAdmin Role = "PLATFORM_ADMIN"
	RoleOrgAdmin      Role = "ORG_ADMIN"
	RoleOrgMember     Role = "ORG_MEMBER"
)

// Rank orders roles: a role may do what every lower-ranked role may.
func (r Role) Rank() int {
	switch r {
	case RolePlatformAdmin:
		return 3
	case RoleOrgAdmin:
		return 2
	case RoleOrgMember:
		return 1
	}
	return 0
}

// Scope bounds what a caller may see and touch: every organisation, or
// exactly one. The zero Scope sees nothing.
type Scope struct {
	all bool
	org uuid.NullUUID
}

// AllOrganisations is the platform admin's scope.
func AllOrganisations() Scope { return Scope{all: true} }

// OneOrganisation is an organisation member's scope.
func OneOrganisation(id uuid.UUID) Scope { return Scope{org: uuid.NullUUID{UUID: id, Valid: true}} }

// All reports whether the scope spans every organisation.
func (s Scope) All() bool { return s.all }

// Organisation is the one organisation of a narrow scope.
func (s Scope) Organisation() (uuid.UUID, bool) { return s.org.UUID, s.org.Valid }

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
