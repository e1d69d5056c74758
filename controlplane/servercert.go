package controlplane

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/runmesh/runmesh/pki/ca"
)

// serverCert is one of the replica's own certificates from our CA: the
// runner listener's, or the client certificate it relays sessions to other
// replicas with. It is renewed at two thirds of its life and swapped in
// live: new handshakes get the new one, nothing restarts.
type serverCert struct {
	what    string // for the log: "runner listener", "replica"
	make    func(context.Context) (*tls.Certificate, error)
	log     *slog.Logger
	current atomic.Pointer[tls.Certificate]
}

// listenerCert is the runner listener's, for names.
func listenerCert(auth *ca.Authority, names []string, lifetime time.Duration, log *slog.Logger) *serverCert {
	return &serverCert{what: "runner listener", log: log.With("names", names), make: func(ctx context.Context) (*tls.Certificate, error) {
		return auth.IssueServer(ctx, names, lifetime)
	}}
}

// replicaCert is the client certificate of replica id.
func replicaCert(auth *ca.Authority, id string, lifetime time.Duration, log *slog.Logger) *serverCert {
	return &serverCert{what: "replica", log: log.With("replica", id), make: func(ctx context.Context) (*tls.Certificate, error) {
		return auth.IssueReplica(ctx, id, lifetime)
	}}
}

func (c *serverCert) issue(ctx context.Context) error {
	cert, err := c.make(ctx)
	if err != nil {
		return err
	}
	c.current.Store(cert)
	c.log.Info(c.what+" certificate issued", "serial", cert.Leaf.SerialNumber.String(), "not_after", cert.Leaf.NotAfter)
	return nil
}

// notAfter is when the current certificate expires (zero before the first).
func (c *serverCert) notAfter() time.Time {
	if cert := c.current.Load(); cert != nil {
		return cert.Leaf.NotAfter
	}
	return time.Time{}
}

func (c *serverCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.current.Load(), nil
}

func (c *serverCert) getClient(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.current.Load(), nil
}

// renew keeps the certificate fresh until ctx ends, retrying failures.
func (c *serverCert) renew(ctx context.Context) {
	for {
		leaf := c.current.Load().Leaf
		at := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		for ctx.Err() == nil {
			if err := c.issue(ctx); err == nil {
				break
			} else {
				c.log.Error("renew "+c.what+" certificate", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(30 * time.Second):
			}
		}
	}
}
