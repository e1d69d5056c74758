package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store/internal/dbsqlc"
)

// RunnerStatus is where a runner stands with the administrators.
type RunnerStatus string

const (
	RunnerPending  RunnerStatus = "PENDING"
	RunnerApproved RunnerStatus = "APPROVED"
	RunnerRejected RunnerStatus = "REJECTED"
	RunnerRevoked  RunnerStatus = "REVOKED"
)

// Runner is an enrolled machine.
type Runner struct {
	ID             uuid.UUID
	PoolID         uuid.UUID
	OrganisationID *uuid.UUID // the pool's; nil for a platform pool
	Name           string
	Status         RunnerStatus
	StatusReason   string
	PublicKey      []byte
	Fingerprint    string
	CSR            []byte // DER
	EnrolledAt     time.Time
	DecidedAt      *time.Time
	DecidedBy      *uuid.UUID
}

func runnerFromRow(r dbsqlc.Runner, org uuid.NullUUID) Runner {
	return Runner{
		ID:             r.ID,
		PoolID:         r.PoolID,
		OrganisationID: uuidPtr(org),
		Name:           r.Name,
		Status:         RunnerStatus(r.Status),
		StatusReason:   r.StatusReason,
		PublicKey:      r.PublicKey,
		Fingerprint:    r.Fingerprint,
		CSR:            r.Csr,
		EnrolledAt:     r.EnrolledAt,
		DecidedAt:      r.DecidedAt,
		DecidedBy:      uuidPtr(r.DecidedBy),
	}
}

// EnrolmentToken is a stored enrolment token (its digest, never the token).
type EnrolmentToken struct {
	ID        uuid.UUID
	PoolID    uuid.UUID
	ExpiresAt time.Time
}

// CreateEnrolmentToken records a token for a pool inside scope (another
// organisation's pool is ErrNotFound).
func (s *Store) CreateEnrolmentToken(ctx context.Context, scope Scope, poolID uuid.UUID, digest []byte, createdBy *uuid.UUID, expiresAt time.Time) (EnrolmentToken, error) {
	if _, err := s.Pool(ctx, scope, poolID); err != nil {
		return EnrolmentToken{}, err
	}
	row, err := s.q.CreateEnrolmentToken(ctx, s.conn(ctx), dbsqlc.CreateEnrolmentTokenParams{
		PoolID: poolID, TokenHash: digest, CreatedBy: nullUUID(createdBy), ExpiresAt: expiresAt,
	})
	if err != nil {
		return EnrolmentToken{}, mapErr(err)
	}
	return EnrolmentToken{ID: row.ID, PoolID: row.PoolID, ExpiresAt: row.ExpiresAt}, nil
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
}

// Enrol consumes the token and creates a PENDING runner in the token's pool,
// in one transaction: a refused runner (a taken name or key) leaves the
// token unused.
func (s *Store) Enrol(ctx context.Context, n NewRunner) (Runner, error) {
	var out Runner
	err := s.WithTx(ctx, func(ctx context.Context) error {
		tok, err := s.q.UseEnrolmentToken(ctx, s.conn(ctx), dbsqlc.UseEnrolmentTokenParams{TokenHash: n.TokenDigest})
		if err != nil {
			if errors.Is(mapErr(err), ErrNotFound) {
				return ErrTokenRefused
			}
			return mapErr(err)
		}
		row, err := s.q.CreateRunner(ctx, s.conn(ctx), dbsqlc.CreateRunnerParams{
			PoolID: tok.PoolID, Name: n.Name, PublicKey: n.PublicKey, Fingerprint: n.Fingerprint,
			Csr: n.CSR, EnrolmentTokenID: tok.ID,
		})
		if err != nil {
			return mapErr(err)
		}
		r, err := s.q.GetRunner(ctx, s.conn(ctx), dbsqlc.GetRunnerParams{ID: row.ID, AllOrgs: true})
		if err != nil {
			return mapErr(err)
		}
		out = runnerFromRow(r.Runner, r.OrganisationID)
		return nil
	})
	return out, err
}

// Runner is one runner inside scope, or ErrNotFound.
func (s *Store) Runner(ctx context.Context, scope Scope, id uuid.UUID) (Runner, error) {
	r, err := s.q.GetRunner(ctx, s.conn(ctx), dbsqlc.GetRunnerParams{ID: id, AllOrgs: scope.all, ScopeOrg: scope.org})
	if err != nil {
		return Runner{}, mapErr(err)
	}
	return runnerFromRow(r.Runner, r.OrganisationID), nil
}

// RunnerFilter narrows a runner listing.
type RunnerFilter struct {
	PoolID *uuid.UUID
	Status *RunnerStatus
}

// Runners lists the runners inside scope that match f, oldest first.
func (s *Store) Runners(ctx context.Context, scope Scope, f RunnerFilter) ([]Runner, error) {
	var status *string
	if f.Status != nil {
		v := string(*f.Status)
		status = &v
	}
	rows, err := s.q.ListRunners(ctx, s.conn(ctx), dbsqlc.ListRunnersParams{
		AllOrgs: scope.all, ScopeOrg: scope.org, PoolID: nullUUID(f.PoolID), Status: status,
	})
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]Runner, len(rows))
	for i, r := range rows {
		out[i] = runnerFromRow(r.Runner, r.OrganisationID)
	}
	return out, nil
}

// RunnerDecision is what DecideRunner's callback returns: the new status
// and why.
type RunnerDecision struct {
	Status RunnerStatus
	Reason string
}

// DecideRunner locks the runner (inside scope), lets decide look at it and
// choose its new status, stores that, and wakes whoever waits on the
// runner. decide's error aborts everything. Work decide does on the store
// with ctx joins the transaction.
func (s *Store) DecideRunner(ctx context.Context, scope Scope, id uuid.UUID, by *uuid.UUID, decide func(ctx context.Context, r Runner) (RunnerDecision, error)) (Runner, error) {
	var out Runner
	err := s.WithTx(ctx, func(ctx context.Context) error {
		row, err := s.q.GetRunnerForUpdate(ctx, s.conn(ctx), dbsqlc.GetRunnerForUpdateParams{ID: id, AllOrgs: scope.all, ScopeOrg: scope.org})
		if err != nil {
			return mapErr(err)
		}
		d, err := decide(ctx, runnerFromRow(row.Runner, row.OrganisationID))
		if err != nil {
			return err
		}
		updated, err := s.q.SetRunnerStatus(ctx, s.conn(ctx), dbsqlc.SetRunnerStatusParams{
			ID: id, Status: string(d.Status), StatusReason: d.Reason, DecidedBy: nullUUID(by),
		})
		if err != nil {
			return mapErr(err)
		}
		if d.Status == RunnerRevoked {
			if _, err := s.q.RevokeRunnerCertificates(ctx, s.conn(ctx), dbsqlc.RevokeRunnerCertificatesParams{
				RunnerID: uuid.NullUUID{UUID: id, Valid: true}, Reason: "runner revoked: " + d.Reason,
			}); err != nil {
				return mapErr(err)
			}
		}
		if err := s.q.NotifyRunnerStatus(ctx, s.conn(ctx), id.String()); err != nil {
			return mapErr(err)
		}
		out = runnerFromRow(updated, row.OrganisationID)
		return nil
	})
	return out, err
}
