package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/smallstep/certificates/api"
	"github.com/smallstep/certificates/authority"
	"github.com/smallstep/certificates/authority/config"
	"github.com/smallstep/certificates/authority/provisioner"
	"github.com/smallstep/certificates/db"

	"github.com/runmesh/runmesh/pki"
)

// CertificateDB is where the authority records what it issues and
// revokes. The server implements it over PostgreSQL, so certificates and
// revocations are rows it can query and show.
type CertificateDB interface {
	db.AuthDB
	// StoreCertificateChain records an issued certificate (chain[0]).
	StoreCertificateChain(chain ...*x509.Certificate) error
	// StoreRenewedCertificate records a renewal. The authority stores
	// renewals only through this method: without it a renewed certificate
	// would go unrecorded, and unrecorded certificates are refused.
	StoreRenewedCertificate(old *x509.Certificate, chain ...*x509.Certificate) error
}

// Authority issues and renews certificates with the intermediate.
type Authority struct {
	keys *Keys
	auth *authority.Authority
}

// Backdate is how far before issue a certificate becomes valid, so hosts
// whose clocks run a little behind accept it. The authority renews a
// certificate for (NotAfter - NotBefore - Backdate), so the same value must
// go into the authority's own config and into what we issue, or every
// renewal would shorten the lifetime.
const Backdate = 30 * time.Second

// NewAuthority embeds a smallstep authority over keys and cdb.
func NewAuthority(keys *Keys, cdb CertificateDB) (*Authority, error) {
	a, err := authority.NewEmbedded(
		authority.WithConfig(&config.Config{AuthorityConfig: &config.AuthConfig{
			Backdate: &provisioner.Duration{Duration: Backdate},
		}}),
		authority.WithX509RootCerts(keys.Root),
		authority.WithX509Signer(keys.Intermediate, keys.IntermediateKey),
		authority.WithDatabase(cdb),
		authority.WithQuietInit(),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded authority: %w", err)
	}
	return &Authority{keys: keys, auth: a}, nil
}

// Keys is the CA the authority signs for.
func (a *Authority) Keys() *Keys { return a.keys }

// Roots is a pool holding the root, for verifying peers.
func (a *Authority) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.keys.Root)
	return p
}

// IssueRunner signs a client certificate for runner id. Only the CSR's
// public key is used (it must be Ed25519): whatever names the CSR asks
// for, the certificate names the runner and nothing else.
func (a *Authority) IssueRunner(ctx context.Context, csr *x509.CertificateRequest, id string, lifetime time.Duration) ([]*x509.Certificate, error) {
	if _, ok := csr.PublicKey.(ed25519.PublicKey); !ok {
		return nil, errors.New("runner keys must be Ed25519")
	}
	chain, err := a.sign(ctx, csr, lifetime, x509.ExtKeyUsageClientAuth, func(c *x509.Certificate) {
		c.Subject = pkix.Name{CommonName: id, Organization: []string{"runmesh runner"}}
		c.URIs = []*url.URL{pki.RunnerURI(id)}
	})
	if err != nil {
		return nil, fmt.Errorf("issue runner certificate: %w", err)
	}
	return chain, nil
}

// IssueServer makes a fresh key and a server certificate for names (DNS
// names or IP addresses), for the runner listener.
func (a *Authority) IssueServer(ctx context.Context, names []string, lifetime time.Duration) (*tls.Certificate, error) {
	cert, err := a.issueWithNewKey(ctx, lifetime, x509.ExtKeyUsageServerAuth, func(c *x509.Certificate) {
		c.Subject = pkix.Name{CommonName: names[0]}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				c.IPAddresses = append(c.IPAddresses, ip)
			} else {
				c.DNSNames = append(c.DNSNames, n)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("issue server certificate: %w", err)
	}
	return cert, nil
}

// IssueReplica makes a fresh key and a client certificate naming replica
// id (pki.ReplicaURI), which a replica presents to the others' runner
// listeners to relay a session.
func (a *Authority) IssueReplica(ctx context.Context, id string, lifetime time.Duration) (*tls.Certificate, error) {
	cert, err := a.issueWithNewKey(ctx, lifetime, x509.ExtKeyUsageClientAuth, func(c *x509.Certificate) {
		c.Subject = pkix.Name{CommonName: id, Organization: []string{"runmesh replica"}}
		c.URIs = []*url.URL{pki.ReplicaURI(id)}
	})
	if err != nil {
		return nil, fmt.Errorf("issue replica certificate: %w", err)
	}
	return cert, nil
}

func (a *Authority) issueWithNewKey(ctx context.Context, lifetime time.Duration, usage x509.ExtKeyUsage, name func(*x509.Certificate)) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, err
	}
	chain, err := a.sign(ctx, csr, lifetime, usage, name)
	if err != nil {
		return nil, err
	}
	out := &tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		out.Certificate = append(out.Certificate, c.Raw)
	}
	return out, nil
}

// sign issues a leaf for csr's key with the authority. Names come only from
// name: whatever the CSR asked for (names, usages, any extension) is
// dropped first.
func (a *Authority) sign(ctx context.Context, csr *x509.CertificateRequest, lifetime time.Duration, usage x509.ExtKeyUsage, name func(*x509.Certificate)) ([]*x509.Certificate, error) {
	now := time.Now()
	return a.auth.SignWithContext(ctx, csr, provisioner.SignOptions{}, provisioner.CertificateModifierFunc(
		func(c *x509.Certificate, _ provisioner.SignOptions) error {
			// The template starts as a copy of the CSR, extensions included,
			// and x509.CreateCertificate lets ExtraExtensions override the
			// fields set below (names, key usages, basic constraints). Drop
			// every extension the CSR asked for: nothing of it is ours.
			c.ExtraExtensions = nil
			c.DNSNames, c.IPAddresses, c.EmailAddresses, c.URIs = nil, nil, nil, nil
			c.BasicConstraintsValid, c.IsCA = true, false
			name(c)
			c.KeyUsage = x509.KeyUsageDigitalSignature
			c.ExtKeyUsage = []x509.ExtKeyUsage{usage}
			c.NotBefore = now.Add(-Backdate)
			c.NotAfter = now.Add(lifetime)
			return nil
		}))
}

// StepHandler serves the step-ca endpoints runners and the step CLI use:
// health, version, roots and intermediates for bootstrap, and renewal and
// revocation over mutual TLS. /renew answers with "Connection: close" and
// re-checks the client certificate's validity itself: a connection kept
// alive since before the certificate expired still presents it. Bodies are
// bounded (MaxStepBodyBytes) before step-ca reads them; /version says
// version, the server's; other routes answer 404 in step-ca's error format.
func (a *Authority) StepHandler(version string) http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) { stepError(w, http.StatusNotFound, "not found") })
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		stepError(w, http.StatusMethodNotAllowed, "method not allowed")
	})
	r.Use(boundStepBody)
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			next.ServeHTTP(w, req.WithContext(authority.NewContext(req.Context(), a.auth)))
		})
	})
	r.Get("/health", api.Health)
	r.Get("/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"version": version, "requireClientAuthentication": false})
	})
	r.Get("/root/{sha}", api.Root)
	r.Get("/roots", api.Roots)
	r.Get("/roots.pem", api.RootsPEM)
	r.Get("/intermediates", api.Intermediates)
	r.Get("/intermediates.pem", api.IntermediatesPEM)
	r.Post("/renew", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Connection", "close")
		if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
			leaf := req.TLS.PeerCertificates[0]
			if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
				http.Error(w, `{"status":401,"message":"the client certificate is not valid now"}`, http.StatusUnauthorized)
				return
			}
		}
		api.Renew(w, req)
	})
	r.With(checkRevoke).Post("/revoke", api.Revoke)
	return r
}
