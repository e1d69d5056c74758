// Package renewal keeps the runner's certificate fresh: it renews over
// mutual TLS at two thirds of the certificate's life (with jitter, so a
// fleet approved together does not renew together), swaps the new one in
// for the next handshake, and picks up a certificate renewed on disk by
// someone else (`step ca renew --daemon`, the renew timer).
package renewal

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/internal/health"
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
	// Certificate, if set, says whether the certificate in use is valid
	// and cert.pem readable, checked at every look at the file; Renewal,
	// whether the last renewal worked.
	Certificate, Renewal *health.Condition
}

// Run renews until ctx ends.
func (r *Renewer) Run(ctx context.Context) {
	if r.PollFile == 0 {
		r.PollFile = 5 * time.Second
	}
	log := r.Log.With("component", "renewal")
	backoff := 5 * time.Second
	jitter := rand.Float64() * 0.05
	r.check(nil)
	r.due(Point(r.ID.Leaf(), jitter))
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
		r.check(err)
		if changed {
			log.Info("picked up a certificate renewed on disk", "serial", r.ID.Leaf().SerialNumber.String(), "not_after", r.ID.Leaf().NotAfter)
			r.renewed(jitter)
			continue
		}
		if time.Now().Before(at) {
			continue
		}
		if err := r.renew(ctx); err != nil {
			log.Error("renewal failed; retrying", "err", err, "backoff", backoff, "expires", leaf.NotAfter)
			if r.Renewal != nil {
				r.Renewal.SetUnhealthy(fmt.Sprintf("%v; retrying, and the certificate expires at %s", err, stamp(leaf.NotAfter)))
			}
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
		r.check(nil)
		r.renewed(jitter)
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
		return refusedAdvice(err, r.ID.Leaf())
	}
	if err := r.ID.Replace(chain); err != nil {
		return err
	}
	// The server closes the connection after /renew; drop any others so
	// the next request presents the new certificate.
	r.Client.CloseIdle()
	return nil
}

// renewed tells Renewed, and Renewal when the new certificate is due.
func (r *Renewer) renewed(jitter float64) {
	if r.Renewed != nil {
		r.Renewed(r.ID.Leaf())
	}
	r.due(Point(r.ID.Leaf(), jitter))
}

func (r *Renewer) due(at time.Time) {
	if r.Renewal != nil {
		r.Renewal.SetHealthy("next due at " + stamp(at))
	}
}

// check sets Certificate from the certificate in use and what reading
// cert.pem last gave (readErr).
func (r *Renewer) check(readErr error) {
	if r.Certificate != nil {
		r.Certificate.Set(Valid(time.Now(), r.ID.Leaf(), readErr))
	}
}

// Valid says whether leaf, the certificate in use, is valid at now and
// cert.pem could be read (readErr nil): a file that cannot be read is
// where the next start would fail, whatever the certificate in memory.
func Valid(now time.Time, leaf *x509.Certificate, readErr error) (bool, string) {
	switch {
	case now.Before(leaf.NotBefore):
		return false, "not valid before " + stamp(leaf.NotBefore)
	case !now.Before(leaf.NotAfter):
		return false, "expired at " + stamp(leaf.NotAfter)
	case readErr != nil:
		return false, fmt.Sprintf("%v; using the certificate read before, valid until %s", readErr, stamp(leaf.NotAfter))
	}
	return true, "valid until " + stamp(leaf.NotAfter)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// refusedAdvice says what to do when the server refuses the certificate
// itself at the handshake: that serial was revoked (step ca revoke), or its
// runner was (revokeRunner), and waiting will not mend it.
func refusedAdvice(err error, leaf *x509.Certificate) error {
	if !strings.Contains(err.Error(), "tls: bad certificate") && !strings.Contains(err.Error(), "certificate revoked") {
		return err
	}
	return fmt.Errorf("%w: the server refuses certificate %s: it was revoked on its own (step ca revoke), or the runner was. "+
		"If the runner is still APPROVED (runmesh runner <id>), put another valid certificate of it in place (step ca renew --force with that "+
		"certificate's files) and restart the agent; otherwise enrol the host again", err, leaf.SerialNumber)
}
