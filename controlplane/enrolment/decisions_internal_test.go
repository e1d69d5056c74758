package enrolment

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Which runner each decision applies to, and what it decides: approval of
// a PENDING runner with exactly its fingerprint; rejection of a PENDING
// one; revocation of an APPROVED or PENDING one; retirement (a revocation)
// of any runner neither rejected nor retired.
func TestEachDecisionsRunners(t *testing.T) {
	t.Parallel()
	retiredAt := time.Now()
	runner := func(s record.RunnerStatus, retired bool) record.Runner {
		r := record.Runner{Status: s, Fingerprint: "SHA256:right"}
		if retired {
			r.RetiredAt = &retiredAt
		}
		return r
	}
	statuses := []record.RunnerStatus{record.RunnerPending, record.RunnerApproved, record.RunnerRejected, record.RunnerRevoked}
	for _, s := range statuses {
		d, err := approval(runner(s, false), "SHA256:right")
		if s == record.RunnerPending {
			require.NoError(t, err)
			require.Equal(t, store.RunnerDecision{Status: record.RunnerApproved}, d)
		} else {
			require.Equal(t, &WrongStatusError{Status: s}, err, "approval of %s", s)
		}

		d, err = rejection(runner(s, false), "not ours")
		if s == record.RunnerPending {
			require.NoError(t, err)
			require.Equal(t, store.RunnerDecision{Status: record.RunnerRejected, Reason: "not ours"}, d)
		} else {
			require.Equal(t, &WrongStatusError{Status: s}, err, "rejection of %s", s)
		}

		d, err = revocation(runner(s, false), "stolen")
		if s == record.RunnerPending || s == record.RunnerApproved {
			require.NoError(t, err, "revocation of %s", s)
			require.Equal(t, store.RunnerDecision{Status: record.RunnerRevoked, Reason: "stolen"}, d)
		} else {
			require.Equal(t, &WrongStatusError{Status: s}, err, "revocation of %s", s)
		}

		d, err = retirement(runner(s, false), "old")
		if s != record.RunnerRejected {
			require.NoError(t, err, "retirement of %s", s)
			require.Equal(t, store.RunnerDecision{Status: record.RunnerRevoked, Reason: "retired: old"}, d)
		} else {
			require.Equal(t, &WrongStatusError{Status: s}, err, "retirement of %s", s)
		}
		_, err = retirement(runner(s, true), "again")
		require.Equal(t, &WrongStatusError{Status: s}, err, "retirement of a retired %s runner", s)
	}

	for _, fp := range []string{"SHA256:wrong", "SHA256:righ", "SHA256:right ", ""} {
		_, err := approval(runner(record.RunnerPending, false), fp)
		require.ErrorIs(t, err, ErrFingerprintMismatch, fp)
	}
	require.Equal(t, "the runner is REVOKED: this does not apply to it", (&WrongStatusError{Status: record.RunnerRevoked}).Error())
}
