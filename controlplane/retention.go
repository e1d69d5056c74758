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
// (jobs.Sweeper.AlsoPrune).

// drain runs batch after batch until one reports it was not full. An
// error ends it, and is logged unless ctx ended.
func (s *Server) drain(ctx context.Context, what string, batch func(context.Context) (full bool, err error)) {
	for {
		full, err := batch(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("pruning "+what, "err", err)
			}
			return
		}
		if !full {
			return
		}
	}
}

// pruneCertificates deletes certificates long expired, and their
// revocations.
func (s *Server) pruneCertificates(ctx context.Context) {
	var certs, revocations int
	s.drain(ctx, "expired certificates", func(ctx context.Context) (bool, error) {
		c, r, err := s.opts.Store.PruneCertificates(ctx, certificateRetention, pruneBatch)
		certs, revocations = certs+c, revocations+r
		return c == pruneBatch || r == pruneBatch, err
	})
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
	s.drain(ctx, "the audit log", func(ctx context.Context) (bool, error) {
		n, err := s.opts.Store.PruneAudit(ctx, keep, pruneBatch)
		total += n
		return n == pruneBatch, err
	})
	if total > 0 {
		s.log.Info("pruned the audit log", "entries", total, "retention", keep.String())
	}
}
