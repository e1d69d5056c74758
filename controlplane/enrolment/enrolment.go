// Package enrolment is how a runner earns its identity: enrolment tokens,
// the administrator's decision (approval only with the exact key
// fingerprint), the certificates that follow, and revocation by identity.
// The GraphQL API and the runner listener both go through it.
package enrolment

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/audit"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/pki/ca"
)

// ErrFingerprintMismatch: the fingerprint given at approval is not the
// runner's. Nothing changes.
var ErrFingerprintMismatch = errors.New("fingerprint does not match the runner's key")

// WrongStatusError: the runner is not in a status the action applies to.
type WrongStatusError struct{ Status record.RunnerStatus }

func (e *WrongStatusError) Error() string {
	return fmt.Sprintf("the runner is %s: this does not apply to it", e.Status)
}

// Service issues enrolment tokens, decides on runners, enrols them and
// tells who a runner's certificate belongs to.
type Service struct {
	st        *store.Store
	listener  *store.Listener
	authority *ca.Authority
	lifetime  time.Duration
	log       *slog.Logger
	ids       *identities
}

// DefaultCertLifetime is DESIGN.md's 24 hours.
const DefaultCertLifetime = 24 * time.Hour

// Options are what a Service works with.
type Options struct {
	Store *store.Store
	// Listener wakes enrolled runners waiting for a decision, and keeps
	// Authenticate's cache honest while Watch runs (nil: Wait and Watch
	// must not be called).
	Listener *store.Listener
	// Authority signs runner certificates.
	Authority *ca.Authority
	// CertLifetime is each certificate's (zero: DefaultCertLifetime).
	CertLifetime time.Duration
	Log          *slog.Logger
}

// New returns the service.
func New(o Options) *Service {
	if o.CertLifetime == 0 {
		o.CertLifetime = DefaultCertLifetime
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{st: o.Store, listener: o.Listener, authority: o.Authority, lifetime: o.CertLifetime,
		log: o.Log.With("component", "enrolment"), ids: newIdentities(o.Store)}
}

// Bounds of an enrolment token's life: long enough to reach the host, short
// enough that a leaked one soon stops mattering.
const MinTokenTTL, MaxTokenTTL = time.Minute, 7 * 24 * time.Hour

// CreateToken makes a single-use enrolment token for a pool in scope. The
// token is returned once; only its digest is stored.
func (s *Service) CreateToken(ctx context.Context, scope record.Scope, poolID uuid.UUID, ttl time.Duration, by *uuid.UUID) (string, record.EnrolmentToken, error) {
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return "", record.EnrolmentToken{}, record.Invalidf("ttlSeconds: between %d and %d", int(MinTokenTTL.Seconds()), int(MaxTokenTTL.Seconds()))
	}
	token, digest := tokens.Enrolment.New()
	expires := time.Now().Add(ttl).UTC().Truncate(time.Microsecond)
	t, err := audit.Do(ctx, s.st, func(tx *store.Tx) (record.EnrolmentToken, error) {
		return tx.CreateEnrolmentToken(ctx, scope, poolID, digest, by, expires)
	})
	if err != nil {
		return "", record.EnrolmentToken{}, err
	}
	return token, t, nil
}

// Approve approves a PENDING runner, but only when fingerprint is exactly
// its key's, and issues its first certificate in the same transaction.
func (s *Service) Approve(ctx context.Context, scope record.Scope, id uuid.UUID, fingerprint string, by *uuid.UUID) (record.Runner, error) {
	return s.decide(ctx, scope, id, by, func(r record.Runner) (store.RunnerDecision, error) {
		return approval(r, fingerprint)
	}, s.firstCertificate)
}

// firstCertificate is what comes with an approval: the runner's first
// certificate, and the inventory later heartbeats are held to.
func (s *Service) firstCertificate(ctx context.Context, tx *store.Tx, r record.Runner) error {
	if _, err := s.Issue(ctx, r); err != nil {
		return err
	}
	// What the runner reported at enrolment is what is approved.
	return tx.SetInventory(ctx, r.ID, fleet.InventoryOf(r))
}

// Reject turns a PENDING runner away for good.
func (s *Service) Reject(ctx context.Context, scope record.Scope, id uuid.UUID, reason string, by *uuid.UUID) (record.Runner, error) {
	if err := record.CheckReason(reason); err != nil {
		return record.Runner{}, err
	}
	return s.decide(ctx, scope, id, by, func(r record.Runner) (store.RunnerDecision, error) {
		return rejection(r, reason)
	}, nil)
}

// Revoke ends an APPROVED (or PENDING) runner's identity: every certificate
// it holds stops working at the next handshake or request, and renewal is
// refused.
func (s *Service) Revoke(ctx context.Context, scope record.Scope, id uuid.UUID, reason string, by *uuid.UUID) (record.Runner, error) {
	if err := record.CheckReason(reason); err != nil {
		return record.Runner{}, err
	}
	return s.decide(ctx, scope, id, by, func(r record.Runner) (store.RunnerDecision, error) {
		return revocation(r, reason)
	}, nil)
}

// Retire takes a runner out of the fleet for good: it is revoked (so it
// cannot come back under its old identity) and marked retired.
func (s *Service) Retire(ctx context.Context, scope record.Scope, id uuid.UUID, reason string, by *uuid.UUID) (record.Runner, error) {
	if err := record.CheckReason(reason); err != nil {
		return record.Runner{}, err
	}
	return s.decide(ctx, scope, id, by, func(r record.Runner) (store.RunnerDecision, error) {
		return retirement(r, reason)
	}, func(ctx context.Context, tx *store.Tx, r record.Runner) error {
		return tx.Retire(ctx, r.ID)
	})
}

// LatestCertificates is the newest certificate of each runner, for runners
// the caller has read through its scope; runners without one are absent
// (for dataloaders).
func (s *Service) LatestCertificates(ctx context.Context, runnerIDs []uuid.UUID) (map[uuid.UUID]record.Certificate, error) {
	return s.st.LatestCertificates(ctx, runnerIDs)
}

// Issue signs a certificate for the runner's enrolled key (from the CSR it
// sent at enrolment). The authority records it.
func (s *Service) Issue(ctx context.Context, r record.Runner) ([]*x509.Certificate, error) {
	csr, err := x509.ParseCertificateRequest(r.CSR)
	if err != nil {
		return nil, fmt.Errorf("stored certificate request: %w", err)
	}
	return s.authority.IssueRunner(ctx, csr, r.ID.String(), s.lifetime)
}

// CurrentChain is an approved runner's newest certificate chain. A runner
// coming back after two thirds of its certificate's life (or with none) gets
// a fresh one.
func (s *Service) CurrentChain(ctx context.Context, r record.Runner) ([]*x509.Certificate, error) {
	if r.Status != record.RunnerApproved {
		return nil, &WrongStatusError{Status: r.Status}
	}
	c, err := s.st.LatestRunnerCertificate(ctx, r.ID)
	if err != nil && !errors.Is(err, record.ErrNotFound) {
		return nil, err
	}
	// Fresh while before its renewal point, two thirds from issue to expiry.
	if err == nil && time.Now().Before(c.IssuedAt.Add(c.NotAfter.Sub(c.IssuedAt)*2/3)) {
		leaf, err := x509.ParseCertificate(c.DER)
		if err != nil {
			return nil, err
		}
		return []*x509.Certificate{leaf, s.authority.Keys().Intermediate}, nil
	}
	return s.Issue(ctx, r)
}

// Tokens lists a page of the enrolment tokens inside scope that match f,
// newest first.
func (s *Service) Tokens(ctx context.Context, scope record.Scope, f record.EnrolmentTokenFilter, p record.Page) ([]record.EnrolmentToken, error) {
	return s.st.EnrolmentTokens(ctx, scope, f, p)
}

// RevokeToken withdraws an unused enrolment token inside scope: no runner
// can enrol with it from the commit on. A used or revoked one is
// record.ErrConflict; the runner that used one is revoked with
// revokeRunner.
func (s *Service) RevokeToken(ctx context.Context, scope record.Scope, id uuid.UUID, by *uuid.UUID) (record.EnrolmentToken, error) {
	return audit.Do(ctx, s.st, func(tx *store.Tx) (record.EnrolmentToken, error) {
		t, err := tx.LockEnrolmentToken(ctx, scope, id)
		if err != nil {
			return record.EnrolmentToken{}, err
		}
		return tx.RevokeEnrolmentToken(ctx, t, by)
	})
}
