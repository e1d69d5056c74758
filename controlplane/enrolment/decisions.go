package enrolment

import (
	"context"
	"crypto/subtle"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// The rules of an administrator's decisions on a runner. Each looks at the
// runner as locked and decides its next status, or refuses; decide applies
// what they decided.

// approval: only a PENDING runner is approved, and only with exactly its
// key's fingerprint.
func approval(r record.Runner, fingerprint string) (store.RunnerDecision, error) {
	if r.Status != record.RunnerPending {
		return store.RunnerDecision{}, &WrongStatusError{Status: r.Status}
	}
	// Constant time: how much of a guess matched is not for the caller to
	// learn.
	if subtle.ConstantTimeCompare([]byte(fingerprint), []byte(r.Fingerprint)) != 1 {
		return store.RunnerDecision{}, ErrFingerprintMismatch
	}
	return store.RunnerDecision{Status: record.RunnerApproved}, nil
}

// rejection: only a PENDING runner is turned away.
func rejection(r record.Runner, reason string) (store.RunnerDecision, error) {
	if r.Status != record.RunnerPending {
		return store.RunnerDecision{}, &WrongStatusError{Status: r.Status}
	}
	return store.RunnerDecision{Status: record.RunnerRejected, Reason: reason}, nil
}

// revocation: an APPROVED or PENDING runner loses its identity.
func revocation(r record.Runner, reason string) (store.RunnerDecision, error) {
	if r.Status != record.RunnerApproved && r.Status != record.RunnerPending {
		return store.RunnerDecision{}, &WrongStatusError{Status: r.Status}
	}
	return store.RunnerDecision{Status: record.RunnerRevoked, Reason: reason}, nil
}

// retirement: a runner neither rejected nor retired already is revoked, so
// that it cannot come back under its old identity.
func retirement(r record.Runner, reason string) (store.RunnerDecision, error) {
	if r.Status == record.RunnerRejected || r.RetiredAt != nil {
		return store.RunnerDecision{}, &WrongStatusError{Status: r.Status}
	}
	return store.RunnerDecision{Status: record.RunnerRevoked, Reason: "retired: " + reason}, nil
}

// decide settles a runner's status in one transaction: it locks the runner
// inside scope, has rule decide on it as locked, does what must come with
// the decision (with, when not nil), has the store apply the decision, and
// returns the runner as stored afterwards. A refusal, by the rule or by
// anything after it, changes nothing.
func (s *Service) decide(ctx context.Context, scope record.Scope, id uuid.UUID, by *uuid.UUID,
	rule func(record.Runner) (store.RunnerDecision, error), with func(context.Context, *store.Tx, record.Runner) error,
) (record.Runner, error) {
	var out record.Runner
	err := audit.Change(ctx, s.st, func(tx *store.Tx) error {
		r, err := tx.LockRunner(ctx, scope, id)
		if err != nil {
			return err
		}
		d, err := rule(r)
		if err != nil {
			return err
		}
		if with != nil {
			if err := with(ctx, tx, r); err != nil {
				return err
			}
		}
		if err := tx.SetRunnerStatus(ctx, r.ID, d, by); err != nil {
			return err
		}
		out, err = tx.Runner(ctx, scope, id)
		return err
	})
	return out, err
}
