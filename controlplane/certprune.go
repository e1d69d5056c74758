package controlplane

import (
	"context"
	"time"
)

// certificateRetention is how long a certificate is kept past its expiry
// (each runner's newest is kept for good) before it is pruned, with its
// revocation. Runners renew every two thirds of a lifetime: without
// pruning, certificates grew by a row per runner every 16 hours for ever.
const certificateRetention = 30 * 24 * time.Hour

// pruneCertificatesBatch bounds one transaction.
const pruneCertificatesBatch = 1000

// pruneCertificates prunes expired certificates every interval until ctx
// ends, batch after batch until none is left.
func (s *Server) pruneCertificates(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var certs, revocations int
		for {
			c, r, err := s.opts.Store.PruneCertificates(ctx, certificateRetention, pruneCertificatesBatch)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("pruning expired certificates", "err", err)
				}
				break
			}
			certs, revocations = certs+c, revocations+r
			if c < pruneCertificatesBatch && r < pruneCertificatesBatch {
				break
			}
		}
		if certs+revocations > 0 {
			s.log.Info("pruned expired certificates", "certificates", certs, "revocations", revocations,
				"kept_past_expiry", certificateRetention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
