package controlplane

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/runmesh/runmesh/pki/ca"
)

// serverCert is the runner listener's own certificate, from our CA. It is
// renewed at two thirds of its life and swapped in live: new handshakes get
// the new one, nothing restarts.
type serverCert struct {
	auth     *ca.Authority
	names    []string
	lifetime time.Duration
	log      *slog.Logger
	current  atomic.Pointer[tls.Certificate]
}

func (c *serverCert) issue(ctx context.Context) error {
	cert, err := c.auth.IssueServer(ctx, c.names, c.lifetime)
	if err != nil {
		return err
	}
	c.current.Store(cert)
	c.log.Info("runner listener certificate issued", "serial", cert.Leaf.SerialNumber.String(), "not_after", cert.Leaf.NotAfter, "names", c.names)
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
				c.log.Error("renew runner listener certificate", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(30 * time.Second):
			}
		}
	}
}
