package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func runnerFromRow(r dbsqlc.Runner, org uuid.NullUUID, leaseSeconds *int32, poolImages []string) (record.Runner, error) {
	reports, err := runnerReports(r)
	if err != nil {
		return record.Runner{}, err
	}
	return record.Runner{
		PoolLeaseSeconds: intPtr(leaseSeconds),
		PoolImages:       nonNil(poolImages),
		RunnerCapacity:   reports,
		ID:               r.ID,
		PoolID:           r.PoolID,
		OrganisationID:   uuidPtr(org),
		Name:             r.Name,
		Status:           record.RunnerStatus(r.Status),
		StatusReason:     r.StatusReason,
		PublicKey:        r.PublicKey,
		Fingerprint:      r.Fingerprint,
		CSR:              r.Csr,
		EnrolledAt:       r.EnrolledAt,
		DecidedAt:        r.DecidedAt,
		DecidedBy:        uuidPtr(r.DecidedBy),
	}, nil
}

// CreateEnrolmentToken records a token for a pool inside scope (another
// organisation's pool is ErrNotFound).
func (s *Querier) CreateEnrolmentToken(ctx context.Context, scope record.Scope, poolID uuid.UUID, digest []byte, createdBy *uuid.UUID, expiresAt time.Time) (record.EnrolmentToken, error) {
	if _, err := s.Pool(ctx, scope, poolID); err != nil {
		return record.EnrolmentToken{}, err
	}
	row, err := s.q.CreateEnrolmentToken(ctx, s.db, dbsqlc.CreateEnrolmentTokenParams{
		PoolID: poolID, TokenHash: digest, CreatedBy: nullUUID(createdBy), ExpiresAt: expiresAt,
	})
	if err != nil {
		return record.EnrolmentToken{}, mapErr(err)
	}
	return record.EnrolmentToken{ID: row.ID, PoolID: row.PoolID, ExpiresAt: row.ExpiresAt}, nil
}

// ErrTokenRefused: the enrolment token is unknown, used or expired. The
// three are one error on purpose.
var ErrTokenRefused = errors.New("enrolment token refused")

// NewRunner is what Enrol needs.
type NewRunner struct {
	TokenDigest []byte
	Name        string
	PublicKey   []byte
	Fingerprint string
	CSR         []byte
	Capacity    ReportedCapacity
}

// Enrol consumes the token and creates a PENDING runner in the token's pool,
// in one transaction: a refused runner (a taken name or key) leaves the
// token unused.
func (s *Querier) Enrol(ctx context.Context, n NewRunner) (record.Runner, error) {
	var out record.Runner
	err := s.atomically(ctx, func(tx *Tx) error {
		tok, err := tx.q.UseEnrolmentToken(ctx, tx.db, dbsqlc.UseEnrolmentTokenParams{TokenHash: n.TokenDigest})
		if err != nil {
			if errors.Is(mapErr(err), record.ErrNotFound) {
				return ErrTokenRefused
			}
			return mapErr(err)
		}
		row, err := tx.q.CreateRunner(ctx, tx.db, dbsqlc.CreateRunnerParams{
			PoolID: tok.PoolID, Name: n.Name, PublicKey: n.PublicKey, Fingerprint: n.Fingerprint,
			Csr: n.CSR, EnrolmentTokenID: tok.ID,
		})
		if err != nil {
			return mapErr(err)
		}
		if err := tx.SetEnrolmentCapacity(ctx, row.ID, n.Capacity); err != nil {
			return err
		}
		// runnerEvents subscribers see the new, pending runner.
		tx.runnerChanged(ChannelRunnerStatus, row.ID.String())
		out, err = tx.Runner(ctx, record.AllOrganisations(), row.ID)
		return err
	})
	return out, err
}

// Runner is one runner inside scope, or ErrNotFound.
func (s *Querier) Runner(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	r, err := s.q.GetRunner(ctx, s.db, dbsqlc.GetRunnerParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Runner{}, mapErr(err)
	}
	return runnerFromRow(r.Runner, r.OrganisationID, r.PoolLeaseSeconds, r.PoolImages)
}

// Runners lists the runners inside scope that match f, oldest first: a
// page of them, or all when p.Limit is 0.
func (s *Querier) Runners(ctx context.Context, scope record.Scope, f record.RunnerFilter, p record.Page) ([]record.Runner, error) {
	var status *string
	if f.Status != nil {
		v := string(*f.Status)
		status = &v
	}
	arg := dbsqlc.ListRunnersParams{
		AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope), PoolID: nullUUID(f.PoolID), Status: status,
		LabelKey: f.LabelKey, LabelValue: f.LabelValue,
	}
	if p.After != nil {
		arg.AfterAt, arg.AfterID = &p.After.At, uuid.NullUUID{UUID: p.After.ID, Valid: true}
	}
	if p.Limit > 0 {
		n := int32(p.Limit)
		arg.MaxRows = &n
	}
	rows, err := s.q.ListRunners(ctx, s.db, arg)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]record.Runner, len(rows))
	for i, r := range rows {
		if out[i], err = runnerFromRow(r.Runner, r.OrganisationID, r.PoolLeaseSeconds, r.PoolImages); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RunnerDecision is what policy decided about a runner's status, and why.
type RunnerDecision struct {
	Status record.RunnerStatus
	Reason string
}

// LockRunner reads the runner (inside scope), locked until the transaction
// ends: decisions on one runner then apply one at a time, each decided on
// what the last one left.
func (s *Tx) LockRunner(ctx context.Context, scope record.Scope, id uuid.UUID) (record.Runner, error) {
	row, err := s.q.GetRunnerForUpdate(ctx, s.db, dbsqlc.GetRunnerForUpdateParams{ID: id, AllOrgs: scope.All(), ScopeOrg: scopeOrg(scope)})
	if err != nil {
		return record.Runner{}, mapErr(err)
	}
	return runnerFromRow(row.Runner, row.OrganisationID, row.PoolLeaseSeconds, row.PoolImages)
}

// SetRunnerStatus applies a decision on the status of a runner that
// LockRunner locked, in the same transaction (a Tx's alone: the decision
// rests on the status as locked). A revocation revokes every
// certificate of the runner with it. Once committed, every replica hears
// that the runner changed.
func (s *Tx) SetRunnerStatus(ctx context.Context, id uuid.UUID, d RunnerDecision, by *uuid.UUID) error {
	if err := s.q.SetRunnerStatus(ctx, s.db, dbsqlc.SetRunnerStatusParams{
		ID: id, Status: string(d.Status), StatusReason: d.Reason, DecidedBy: nullUUID(by),
	}); err != nil {
		return mapErr(err)
	}
	if d.Status == record.RunnerRevoked {
		if _, err := s.q.RevokeRunnerCertificates(ctx, s.db, dbsqlc.RevokeRunnerCertificatesParams{
			RunnerID: uuid.NullUUID{UUID: id, Valid: true}, Reason: "runner revoked: " + d.Reason,
		}); err != nil {
			return mapErr(err)
		}
	}
	s.runnerChanged(ChannelRunnerStatus, id.String())
	return nil
}
