package queue

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
)

// Claim leases to the runner, in one statement, the best jobs that fit it
// together, at most max of them (none when nothing fits). Placement is
// the statement's: what the runner holds already is read under the same
// locks that take the jobs.
func (s *Service) Claim(ctx context.Context, req record.ClaimRequest, max int) ([]record.Job, error) {
	return s.st.ClaimJobs(ctx, req, max)
}

// Finisher is how the service ends attempts (see Finisher): quarantining
// a runner after quarantineAfter host faults in a row (zero: the default).
func (s *Service) Finisher(quarantineAfter int) *Finisher {
	return &Finisher{Store: s.st, QuarantineAfter: quarantineAfter}
}

// FinishAll ends attempts of one runner's jobs (see Finisher.FinishAll),
// with the default quarantine.
func (s *Service) FinishAll(ctx context.Context, runnerID uuid.UUID, outcomes []record.Outcome) ([]Finished, error) {
	return s.Finisher(0).FinishAll(ctx, runnerID, outcomes)
}
