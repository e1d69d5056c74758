// Package record holds the control plane's records as every part of it
// speaks of them: jobs, runners, pools, organisations, admins and what
// belongs to them, who may see them (Scope), and the errors about them. It
// is a leaf (beside runnerapi, whose reports a runner record keeps as
// sent): the store keeps and reads these records, decoded, the domain
// packages decide on them, and the GraphQL API shows them, without any of
// those reaching into another.
package record

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

var (
	// ErrNotFound: no such record, or one outside the caller's scope. The
	// two are deliberately indistinguishable.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write would break a uniqueness rule.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: a value was refused below the API (the database's
	// checks).
	ErrInvalid = errors.New("invalid value")
	// ErrUnavailable: the database could not do it now (out of reach,
	// restarting, out of connections, or a transaction lost to a
	// concurrent one); nothing changed, and the same request may succeed
	// if sent again.
	ErrUnavailable = errors.New("the database is unavailable; try again")
)

// InputError: a request's value refused before anything changed, by the
// domain's rules or by the API that read it; the one type every part of
// the control plane refuses input with. Msg names the input and says what
// it must be ("name: 1 to 200 characters"); it is meant for the caller.
type InputError struct {
	Msg string
	// Item, when not nil, is the place in a batch of the one item refused
	// (the batch as a whole is refused with it).
	Item *int
}

func (e *InputError) Error() string { return e.Msg }

// Unwrap: an input refused is an invalid value, wherever it was refused.
func (e *InputError) Unwrap() error { return ErrInvalid }

// Invalidf is an InputError.
func Invalidf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// InvalidItemf is an InputError about the item at place item of a batch.
func InvalidItemf(item int, format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...), Item: &item}
}

// Reasons are what an administrator writes down with a decision.
const MaxReason = 500

// CheckReason refuses an empty or overlong reason.
func CheckReason(reason string) error {
	if reason == "" || len(reason) > MaxReason {
		return Invalidf("reason: 1 to %d characters", MaxReason)
	}
	return nil
}

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

// Includes reports whether the organisation is inside the scope.
func (s Scope) Includes(org uuid.UUID) bool {
	return s.all || (s.org.Valid && s.org.UUID == org)
}

// Page is one page of a keyset-paged list: at most Limit items, after the
// sort key of the last item seen (nil: from the start).
type Page struct {
	Limit int
	After *Cursor
}

// Cursor is a list's sort key of one item: each list uses the parts its
// order has (a job its id; a runner its enrolment time and id; a run its
// end, its job's id and its attempt; an audit entry its number).
type Cursor struct {
	At time.Time
	ID uuid.UUID
	N  int64
}
