package tenancy

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// SettingChange is what an update does to a pool setting that has a
// server default: nothing (the zero SettingChange), give the pool a value
// of its own (SetTo), or return it to the default (ToDefault).
type SettingChange struct {
	given bool
	value *int // nil: the default
}

// SetTo gives the pool v as its own value of a setting.
func SetTo(v int) SettingChange { return SettingChange{given: true, value: &v} }

// ToDefault returns a setting of the pool to the server's default.
func ToDefault() SettingChange { return SettingChange{given: true} }

func (c SettingChange) applyTo(own *int) *int {
	if !c.given {
		return own
	}
	return c.value
}

// PoolChange is what an update changes in a pool: a field left nil (or a
// zero SettingChange) stays as it is.
type PoolChange struct {
	Name                  *string
	LeaseSeconds          SettingChange
	QueueTimeoutHours     SettingChange
	AllowUnenforcedMemory *bool
	AllowNetwork          *bool
	// Images, when not nil, replace the pool's list.
	Images []string
}

// applyTo is p as c leaves it.
func (c PoolChange) applyTo(p record.Pool) record.Pool {
	if c.Name != nil {
		p.Name = *c.Name
	}
	p.LeaseSeconds = c.LeaseSeconds.applyTo(p.LeaseSeconds)
	p.QueueTimeoutHours = c.QueueTimeoutHours.applyTo(p.QueueTimeoutHours)
	if c.AllowUnenforcedMemory != nil {
		p.AllowUnenforcedMemory = *c.AllowUnenforcedMemory
	}
	if c.AllowNetwork != nil {
		p.AllowNetwork = *c.AllowNetwork
	}
	if c.Images != nil {
		p.Images = c.Images
	}
	return p
}

// mayChange: the platform's pool is the platform admins' alone. An
// organisation's scope does not even show it; the rule is said here, where
// the decision is, all the same.
func mayChange(scope record.Scope, p record.Pool) error {
	if p.OrganisationID == nil && !scope.All() {
		return record.ErrNotFound
	}
	return nil
}

// UpdatePool changes a pool inside scope as c says, in one transaction:
// the pool is locked, the change decided on it as locked and stored. It
// returns the pool as stored; a change refused (a *record.InputError, by
// scope, or a setting the database refuses) changes nothing.
func (s *Service) UpdatePool(ctx context.Context, scope record.Scope, id uuid.UUID, c PoolChange) (record.Pool, error) {
	if err := c.check(); err != nil {
		return record.Pool{}, err
	}
	var out record.Pool
	err := audit.Change(ctx, s.st, func(tx *store.Tx) error {
		p, err := tx.LockPool(ctx, scope, id)
		if err != nil {
			return err
		}
		if err := mayChange(scope, p); err != nil {
			return err
		}
		if out, err = tx.SavePool(ctx, c.applyTo(p)); err != nil {
			return err
		}
		// A setting may have made blocked jobs placeable (memory claims
		// allowed on runners that do not enforce them): they go back to
		// the queue now, not at the next blocked check.
		_, err = tx.UnblockPlaceable(ctx, 0)
		return err
	})
	return out, err
}
