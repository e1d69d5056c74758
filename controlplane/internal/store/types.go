package store

import (
	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
)

// The records the store keeps are package record's, so that the domain
// packages and the API can speak of them without the store; these names
// let the store and its tests go on calling them by their old names.
type (
	Role                 = record.Role
	Scope                = record.Scope
	Admin                = record.Admin
	Organisation         = record.Organisation
	Pool                 = record.Pool
	NewPool              = record.NewPool
	PoolFilter           = record.PoolFilter
	AuditEntry           = record.AuditEntry
	JobState             = record.JobState
	Claim                = record.Claim
	JobOptions           = record.JobOptions
	Job                  = record.Job
	JobFilter            = record.JobFilter
	JobEvent             = record.JobEvent
	JobRun               = record.JobRun
	LogChunk             = record.LogChunk
	JobOutput            = record.JobOutput
	Hold                 = record.Hold
	PoolQueue            = record.PoolQueue
	ClaimRequest         = record.ClaimRequest
	Outcome              = record.Outcome
	RunnerStatus         = record.RunnerStatus
	Runner               = record.Runner
	RunnerCapacity       = record.RunnerCapacity
	Inventory            = record.Inventory
	RunnerFilter         = record.RunnerFilter
	Booking              = record.Booking
	Certificate          = record.Certificate
	EnrolmentToken       = record.EnrolmentToken
	AdminToken           = record.AdminToken
	Page                 = record.Page
	Cursor               = record.Cursor
	RunFilter            = record.RunFilter
	AuditFilter          = record.AuditFilter
	EnrolmentTokenFilter = record.EnrolmentTokenFilter
)

const (
	RolePlatformAdmin = record.RolePlatformAdmin
	RoleOrgAdmin      = record.RoleOrgAdmin
	RoleOrgMember     = record.RoleOrgMember

	JobQueued    = record.JobQueued
	JobLeased    = record.JobLeased
	JobRunning   = record.JobRunning
	JobSucceeded = record.JobSucceeded
	JobFailed    = record.JobFailed
	JobCancelled = record.JobCancelled
	JobExpired   = record.JobExpired
	JobBlocked   = record.JobBlocked

	RunnerPending  = record.RunnerPending
	RunnerApproved = record.RunnerApproved
	RunnerRejected = record.RunnerRejected
	RunnerRevoked  = record.RunnerRevoked
)

var (
	// ErrNotFound: no such row, or one outside the caller's scope.
	ErrNotFound = record.ErrNotFound
	// ErrConflict: the write would break a uniqueness rule.
	ErrConflict = record.ErrConflict
	// ErrInvalid: the database refused a value (a check constraint).
	ErrInvalid = record.ErrInvalid
	// ErrUnavailable: the database could not be reached, or the
	// transaction lost to a concurrent one; the caller may try again.
	ErrUnavailable = record.ErrUnavailable
)

// AllOrganisations is the platform admin's scope.
func AllOrganisations() Scope { return record.AllOrganisations() }

// OneOrganisation is an organisation member's scope.
func OneOrganisation(id uuid.UUID) Scope { return record.OneOrganisation(id) }

// scopeOrg is a narrow scope's organisation as the queries take it (none
// for a wide or an empty scope).
func scopeOrg(s Scope) uuid.NullUUID {
	id, ok := s.Organisation()
	return uuid.NullUUID{UUID: id, Valid: ok}
}
