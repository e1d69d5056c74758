package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
)

func certificateFromRow(r dbsqlc.Certificate) record.Certificate {
	return record.Certificate{
		Serial: r.Serial, RunnerID: uuidPtr(r.RunnerID), DER: r.Der,
		NotBefore: r.NotBefore, NotAfter: r.NotAfter, IssuedAt: r.IssuedAt,
	}
}

// StoreCertificate records an issued certificate. Storing one twice is a
// no-op.
func (s *Querier) StoreCertificate(ctx context.Context, c record.Certificate) error {
	return mapErr(s.q.InsertCertificate(ctx, s.db, dbsqlc.InsertCertificateParams{
		Serial: c.Serial, RunnerID: nullUUID(c.RunnerID), Der: c.DER, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
	}))
}

// CertificateBySerial is one stored certificate, or ErrNotFound.
func (s *Querier) CertificateBySerial(ctx context.Context, serial string) (record.Certificate, error) {
	row, err := s.q.GetCertificate(ctx, s.db, serial)
	if err != nil {
		return record.Certificate{}, mapErr(err)
	}
	return certificateFromRow(row), nil
}

// LatestRunnerCertificate is the unrevoked certificate of a runner that
// expires last, or ErrNotFound.
func (s *Querier) LatestRunnerCertificate(ctx context.Context, runnerID uuid.UUID) (record.Certificate, error) {
	row, err := s.q.LatestRunnerCertificate(ctx, s.db, uuid.NullUUID{UUID: runnerID, Valid: true})
	if err != nil {
		return record.Certificate{}, mapErr(err)
	}
	return certificateFromRow(row), nil
}

// LatestCertificates loads the newest certificate of several runners (for
// dataloaders); runners without one are absent.
func (s *Querier) LatestCertificates(ctx context.Context, runnerIDs []uuid.UUID) (map[uuid.UUID]record.Certificate, error) {
	rows, err := s.q.LatestCertificatesForRunners(ctx, s.db, runnerIDs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[uuid.UUID]record.Certificate, len(rows))
	for _, r := range rows {
		c := record.Certificate{
			Serial: r.Serial, RunnerID: uuidPtr(r.RunnerID), DER: r.Der, NotBefore: r.NotBefore, NotAfter: r.NotAfter,
			IssuedAt: r.IssuedAt, RevokedAt: r.RevokedAt, RevocationReason: r.RevocationReason,
		}
		out[*c.RunnerID] = c
	}
	return out, nil
}

// Revocation is a revoked serial.
type Revocation struct {
	Serial        string
	ReasonCode    int
	Reason        string
	RevokedAt     time.Time
	ExpiresAt     *time.Time
	MTLS          bool
	ProvisionerID string
}

// RevokeCertificate records a revocation; false if the serial was
// already revoked.
func (s *Querier) RevokeCertificate(ctx context.Context, r Revocation) (bool, error) {
	var added bool
	err := s.atomically(ctx, func(tx *Tx) error {
		n, err := tx.q.InsertRevocation(ctx, tx.db, dbsqlc.InsertRevocationParams{
			Serial: r.Serial, ReasonCode: int32(r.ReasonCode), Reason: r.Reason, RevokedAt: r.RevokedAt,
			ExpiresAt: r.ExpiresAt, Mtls: r.MTLS, ProvisionerID: r.ProvisionerID,
		})
		if err != nil {
			return mapErr(err)
		}
		added = n == 1
		tx.runnerChanged(ChannelRevocations, r.Serial)
		return nil
	})
	return added, err
}

// CertificateStanding says whether a presented certificate may be used.
type CertificateStanding struct {
	Known        bool                // we issued it
	Revoked      bool                // its serial was revoked
	RunnerStatus record.RunnerStatus // its runner's status ("" for server certificates)
	RunnerID     *uuid.UUID          // its runner (nil for server certificates)
}

// Usable is the verdict: a certificate we issued, not revoked, and either a
// server certificate or one of an approved runner.
func (c CertificateStanding) Usable() bool {
	return c.Known && !c.Revoked && (c.RunnerStatus == "" || c.RunnerStatus == record.RunnerApproved)
}

// StandingOf looks up a certificate by serial.
func (s *Querier) StandingOf(ctx context.Context, serial string) (CertificateStanding, error) {
	row, err := s.q.CertificateStanding(ctx, s.db, serial)
	if err != nil {
		return CertificateStanding{}, mapErr(err)
	}
	return CertificateStanding{Known: row.Known, Revoked: row.Revoked, RunnerStatus: record.RunnerStatus(row.RunnerStatus),
		RunnerID: uuidPtr(row.RunnerID)}, nil
}

// PruneCertificates deletes, in one transaction, at most max certificates
// that expired longer than keep ago (each runner's newest stays), and at
// most max revocations of certificates so deleted. It returns how many of
// each it deleted.
func (s *Querier) PruneCertificates(ctx context.Context, keep time.Duration, max int) (certificates, revocations int, err error) {
	err = s.atomically(ctx, func(tx *Tx) error {
		n, err := tx.q.PruneCertificates(ctx, tx.db, dbsqlc.PruneCertificatesParams{KeepSeconds: keep.Seconds(), MaxRows: int32(max)})
		if err != nil {
			return mapErr(err)
		}
		m, err := tx.q.PruneRevocations(ctx, tx.db, dbsqlc.PruneRevocationsParams{KeepSeconds: keep.Seconds(), MaxRows: int32(max)})
		certificates, revocations = int(n), int(m)
		return mapErr(err)
	})
	return certificates, revocations, err
}
