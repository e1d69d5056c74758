// Package castore is the embedded CA's database: smallstep's AuthDB over
// the runmesh store, so every certificate issued and revoked is a row the
// rest of the control plane can join against runners.
package castore

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/smallstep/certificates/db"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/pki"
)

// DB implements ca.CertificateDB. The interface carries no context, so each
// call gets a timeout of its own.
type DB struct {
	store   *store.Store
	timeout time.Duration
}

// New returns the CA database over s.
func New(s *store.Store) *DB { return &DB{store: s, timeout: 10 * time.Second} }

func (d *DB) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.timeout)
}

// IsRevoked is true for revoked serials, for certificates of runners that
// are not approved, and for serials we never issued (fail closed).
func (d *DB) IsRevoked(serial string) (bool, error) {
	ctx, cancel := d.ctx()
	defer cancel()
	st, err := d.store.StandingOf(ctx, serial)
	if err != nil {
		return false, err
	}
	return !st.Usable(), nil
}

// IsSSHRevoked: runmesh issues no SSH certificates.
func (d *DB) IsSSHRevoked(string) (bool, error) { return true, nil }

// Revoke records a revocation (step ca revoke: the runner with its
// certificate and key over mTLS, or a token), and audits it in the same
// transaction. Revoking a serial so ends that certificate alone: its
// runner keeps its standing and its other certificates (revokeRunner is
// what ends a runner).
func (d *DB) Revoke(rci *db.RevokedCertificateInfo) error {
	ctx, cancel := d.ctx()
	defer cancel()
	var expires *time.Time
	if !rci.ExpiresAt.IsZero() {
		expires = &rci.ExpiresAt
	}
	var added bool
	err := d.store.WithTx(ctx, func(tx *store.Tx) error {
		var err error
		added, err = tx.RevokeCertificate(ctx, store.Revocation{
			Serial: rci.Serial, ReasonCode: rci.ReasonCode, Reason: rci.Reason, RevokedAt: rci.RevokedAt,
			ExpiresAt: expires, MTLS: rci.MTLS, ProvisionerID: rci.ProvisionerID,
		})
		if err != nil || !added {
			return err
		}
		e, err := revocationEntry(ctx, tx, rci)
		if err != nil {
			return err
		}
		return tx.Audit(ctx, e)
	})
	if err != nil {
		return err
	}
	if !added {
		return db.ErrAlreadyExists
	}
	return nil
}

// revocationEntry is the audit entry of a serial's revocation: the runner
// as the actor when it revoked its own certificate over mTLS, the CA's
// provisioner when a token did.
func revocationEntry(ctx context.Context, tx *store.Tx, rci *db.RevokedCertificateInfo) (record.AuditEntry, error) {
	detail, _ := json.Marshal(map[string]any{"serial": rci.Serial, "reasonCode": rci.ReasonCode, "reason": rci.Reason, "mtls": rci.MTLS})
	e := record.AuditEntry{Action: "revokeCertificate", Outcome: "OK", Detail: detail, ActorName: "step-ca token (provisioner " + rci.ProvisionerID + ")"}
	standing, err := tx.StandingOf(ctx, rci.Serial)
	if err != nil {
		return e, err
	}
	if standing.RunnerID != nil {
		r, err := tx.Runner(ctx, record.AllOrganisations(), *standing.RunnerID)
		if err != nil {
			return e, err
		}
		e.OrganisationID = r.OrganisationID
		if rci.MTLS {
			e.ActorName = fmt.Sprintf("runner %s (%s)", r.Name, r.ID)
		}
	}
	return e, nil
}

// RevokeSSH: runmesh issues no SSH certificates.
func (d *DB) RevokeSSH(*db.RevokedCertificateInfo) error { return db.ErrNotImplemented }

// GetCertificate returns an issued certificate by serial.
func (d *DB) GetCertificate(serial string) (*x509.Certificate, error) {
	ctx, cancel := d.ctx()
	defer cancel()
	c, err := d.store.CertificateBySerial(ctx, serial)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(c.DER)
}

// StoreCertificateChain records chain[0], linked to its runner if it is a
// runner certificate.
func (d *DB) StoreCertificateChain(chain ...*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("store certificate: empty chain")
	}
	leaf := chain[0]
	var runner *uuid.UUID
	if s, ok := pki.RunnerID(leaf); ok {
		id, err := uuid.Parse(s)
		if err != nil {
			return fmt.Errorf("store certificate: runner id %q: %w", s, err)
		}
		runner = &id
	}
	ctx, cancel := d.ctx()
	defer cancel()
	return d.store.StoreCertificate(ctx, record.Certificate{
		Serial: leaf.SerialNumber.String(), RunnerID: runner, DER: leaf.Raw,
		NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
	})
}

// StoreRenewedCertificate records a renewal like any issue.
func (d *DB) StoreRenewedCertificate(_ *x509.Certificate, chain ...*x509.Certificate) error {
	return d.StoreCertificateChain(chain...)
}

// UseToken: runmesh has no one-time-token provisioners; every token is
// refused as already used.
func (d *DB) UseToken(string, string) (bool, error) { return false, nil }

// IsSSHHost: no SSH hosts.
func (d *DB) IsSSHHost(string) (bool, error) { return false, nil }

// GetSSHHostPrincipals: no SSH hosts.
func (d *DB) GetSSHHostPrincipals() ([]string, error) { return nil, nil }

// Shutdown: the store outlives the authority.
func (d *DB) Shutdown() error { return nil }
