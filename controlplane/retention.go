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

// defaultAuditRetention keeps audit entries a year.
const defaultAuditRetention = 365 * 24 * time.Hour

// pruneBatch bounds one transaction of pruning.
const pruneBatch = 1000

// The sweeper runs these beside its pruning of finished jobs
// (jobs.Sweeper.AlsoPrune), batch after batch until none is left.

// pruneCertificates deletes certificates long expired, and their
// revocations.
func (s *Server) pruneCertificates(ctx context.Context) {
	var certs, revocations int
	for {
		c, r, err := s.opts.Store.PruneCertificates(ctx, certificateRetention, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("pruning expired certificates", "err", err)
			}
			return
		}
		certs, revocations = certs+c, revocations+r
		if c < pruneBatch && r < pruneBatch {
			break
		}
	}
	if certs+revocations > 0 {
		s.log.Info("pruned expired certificates", "certificates", certs, "revocations", revocations,
			"kept_past_expiry", certificateRetention.String())
	}
}

// pruneAudit deletes audit entries past their retention.
func (s *Server) pruneAudit(ctx context.Context) {
	keep := s.opts.AuditRetention
	if keep == 0 {
		keep = defaultAuditRetention
	}
	total := 0
	for {
		n, err := s.opts.Store.PruneAudit(ctx, keep, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("pruning the audit log", "err", err)
			}
			return
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("pruned the audit log", "entries", total, "retention", keep.String())
	}
}
