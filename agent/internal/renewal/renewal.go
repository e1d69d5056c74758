// Package renewal keeps the runner's certificate fresh: it renews over
// mutual TLS at two thirds of the certificate's life (with jitter, so a
// fleet approved together does not renew together), swaps the new one in
// for the next handshake, and picks up a certificate renewed on disk by
// someone else (`step ca renew --daemon`, the renew timer).
package renewal

import (
	"context"
	"crypto/x509"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
)

// Point is when a certificate should be renewed: two thirds into its life,
// brought forward by jitter (a fraction of the lifetime, 0 to 0.05).
func Point(leaf *x509.Certificate, jitter float64) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(life*2/3 - time.Duration(float64(life)*jitter))
}

// Renewer renews id's certificate through client.
type Renewer struct {
	ID     *identity.Identity
	Client *runnerclient.Client
	Log    *slog.Logger
	// PollFile is how often cert.pem is checked for an outside renewal.
	PollFile time.Duration
	// Renewed, if set, is called after each swap.
	Renewed func(leaf *x509.Certificate)
}

// Run renews until ctx ends.
func (r *Renewer) Run(ctx context.Context) {
	if r.PollFile == 0 {
		r.PollFile = 5 * time.Second
	}
	log := r.Log.With("component", "renewal")
	backoff := 5 * time.Second
	jitter := rand.Float64() * 0.05
	for {
		leaf := r.ID.Leaf()
		at := Point(leaf, jitter)
		wait := min(time.Until(at), r.PollFile)
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		changed, err := r.ID.Reload()
		if err != nil {
			log.Warn("ignoring the certificate file", "err", err)
		}
		if changed {
			log.Info("picked up a certificate renewed on disk", "serial", r.ID.Leaf().SerialNumber.String(), "not_after", r.ID.Leaf().NotAfter)
			r.notify()
			continue
		}
		if time.Now().Before(at) {
			continue
		}
		if err := r.renew(ctx); err != nil {
			log.Error("renewal failed; retrying", "err", err, "backoff", backoff, "expires", leaf.NotAfter)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Minute)
			continue
		}
		backoff = 5 * time.Second
		jitter = rand.Float64() * 0.05
		log.Info("certificate renewed", "serial", r.ID.Leaf().SerialNumber.String(), "not_after", r.ID.Leaf().NotAfter)
		r.notify()
	}
}

// RenewNow renews once, whatever the certificate's age.
func (r *Renewer) RenewNow(ctx context.Context) error { return r.renew(ctx) }

func (r *Renewer) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A connection kept alive from before would present the old
	// certificate; renew on a fresh one.
	r.Client.CloseIdle()
	chain, err := r.Client.Renew(ctx)
	if err != nil {
		return err
	}
	if err := r.ID.Replace(chain); err != nil {
		return err
	}
	// The server closes the connection after /renew; drop any others so
	// the next request presents the new certificate.
	r.Client.CloseIdle()
	return nil
}

func (r *Renewer) notify() {
	if r.Renewed != nil {
		r.Renewed(r.ID.Leaf())
	}
}
