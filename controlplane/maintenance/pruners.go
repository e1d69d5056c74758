package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// PruneIntervalDefault is each pruner's pace.
const PruneIntervalDefault = 10 * time.Second

const (
	// JobRetentionDefault keeps finished jobs 90 days.
	JobRetentionDefault = 90 * 24 * time.Hour
	// AuditRetentionDefault keeps audit entries a year.
	AuditRetentionDefault = 365 * 24 * time.Hour
	// CertificateRetention is how long a certificate is kept past its
	// expiry (each runner's newest is kept for good) before it is pruned,
	// with its revocation. Runners renew every two thirds of a lifetime:
	// without pruning, certificates grow by a row per runner per renewal
	// for ever.
	CertificateRetention = 30 * 24 * time.Hour
)

// A job may carry up to 64 MiB of output per attempt, so each batch of
// jobs is a transaction of its own, and a pass stops after its budget,
// leaving the rest to the next one. Certificates and audit entries are
// small rows.
const (
	jobPruneBatch       = 500
	jobPruneBudget      = 2 * time.Second
	retentionPruneBatch = 1000
)

// PrunerConfig configures a pruner.
type PrunerConfig struct {
	// Interval between passes (0: PruneIntervalDefault).
	Interval time.Duration
	// Retention is how long a row is kept (0: the pruner's default; the
	// certificate pruner's is fixed).
	Retention time.Duration
	// Batch is how many rows one transaction deletes at most (0: the
	// pruner's default).
	Batch int
	Log   *slog.Logger
}

// JobPruner deletes jobs that ended longer ago than the retention, with
// their events, runs and output. Jobs still queued or held are never
// touched, however old.
type JobPruner struct {
	loop
	store     *store.Store
	log       *slog.Logger
	retention time.Duration
	batch     int
	budget    time.Duration

	testSignals jobPrunerTestSignals
}

type jobPrunerTestSignals struct {
	pruned testSignal[jobPrunePass] // a pass ended, having done this
}

func (ts *jobPrunerTestSignals) init() { ts.pruned.init() }

type jobPrunePass struct {
	Jobs int
	Cut  bool // it ran out of budget and left jobs for the next pass
}

// NewJobPruner returns a job pruner over s; Start starts it.
func NewJobPruner(s *store.Store, cfg PrunerConfig) *JobPruner {
	return &JobPruner{
		loop:      loop{name: "job pruner", interval: orDefault(cfg.Interval, PruneIntervalDefault)},
		store:     s,
		log:       orDiscard(cfg.Log).With("component", "job_pruner"),
		retention: orDefault(cfg.Retention, JobRetentionDefault),
		batch:     orDefault(cfg.Batch, jobPruneBatch),
		budget:    jobPruneBudget,
	}
}

// Start runs a pass at once, then one every interval, until ctx ends or
// Stop.
func (p *JobPruner) Start(ctx context.Context) error { return p.start(ctx, p.pass) }

// Stop ends the pruner and waits for a pass in flight.
func (p *JobPruner) Stop() { p.stop() }

// pass deletes batch after batch, for at most the budget.
func (p *JobPruner) pass(ctx context.Context) {
	start, res, after := time.Now(), jobPrunePass{}, uuid.Nil
	for {
		n, last, err := p.store.PruneJobs(ctx, p.retention, after, p.batch)
		if err != nil {
			failed(ctx, p.log, "pruning finished jobs", err)
			return
		}
		res.Jobs, after = res.Jobs+n, last
		if n < p.batch {
			break
		}
		if time.Since(start) > p.budget {
			res.Cut = true
			break
		}
	}
	p.testSignals.pruned.signal(res)
	switch {
	case res.Cut:
		p.log.Warn("finished jobs past their retention remain; pruning goes on at the next pass", "pruned", res.Jobs)
	case res.Jobs > 0:
		p.log.Info("pruned finished jobs", "jobs", res.Jobs, "retention", p.retention.String())
	}
}

// CertificatePruner deletes certificates long expired, and their
// revocations.
type CertificatePruner struct {
	loop
	store *store.Store
	log   *slog.Logger
	batch int

	testSignals certificatePrunerTestSignals
}

type certificatePrunerTestSignals struct {
	pruned testSignal[certificatePrunePass] // a pass ended, having done this
}

func (ts *certificatePrunerTestSignals) init() { ts.pruned.init() }

type certificatePrunePass struct{ Certificates, Revocations int }

// NewCertificatePruner returns a certificate pruner over s; Start starts
// it. Its retention is CertificateRetention, whatever cfg says.
func NewCertificatePruner(s *store.Store, cfg PrunerConfig) *CertificatePruner {
	return &CertificatePruner{
		loop:  loop{name: "certificate pruner", interval: orDefault(cfg.Interval, PruneIntervalDefault)},
		store: s,
		log:   orDiscard(cfg.Log).With("component", "certificate_pruner"),
		batch: orDefault(cfg.Batch, retentionPruneBatch),
	}
}

// Start runs a pass at once, then one every interval, until ctx ends or
// Stop.
func (p *CertificatePruner) Start(ctx context.Context) error { return p.start(ctx, p.pass) }

// Stop ends the pruner and waits for a pass in flight.
func (p *CertificatePruner) Stop() { p.stop() }

func (p *CertificatePruner) pass(ctx context.Context) {
	var res certificatePrunePass
	ok := drain(ctx, p.log, "pruning expired certificates", func(ctx context.Context) (bool, error) {
		c, r, err := p.store.PruneCertificates(ctx, CertificateRetention, p.batch)
		res.Certificates, res.Revocations = res.Certificates+c, res.Revocations+r
		return c == p.batch || r == p.batch, err
	})
	if !ok {
		return
	}
	p.testSignals.pruned.signal(res)
	if res != (certificatePrunePass{}) {
		p.log.Info("pruned expired certificates", "certificates", res.Certificates, "revocations", res.Revocations,
			"kept_past_expiry", CertificateRetention.String())
	}
}

// AuditPruner deletes audit entries past their retention.
type AuditPruner struct {
	loop
	store     *store.Store
	log       *slog.Logger
	retention time.Duration
	batch     int

	testSignals auditPrunerTestSignals
}

type auditPrunerTestSignals struct {
	pruned testSignal[int] // a pass ended, having deleted this many entries
}

func (ts *auditPrunerTestSignals) init() { ts.pruned.init() }

// NewAuditPruner returns an audit pruner over s; Start starts it.
func NewAuditPruner(s *store.Store, cfg PrunerConfig) *AuditPruner {
	return &AuditPruner{
		loop:      loop{name: "audit pruner", interval: orDefault(cfg.Interval, PruneIntervalDefault)},
		store:     s,
		log:       orDiscard(cfg.Log).With("component", "audit_pruner"),
		retention: orDefault(cfg.Retention, AuditRetentionDefault),
		batch:     orDefault(cfg.Batch, retentionPruneBatch),
	}
}

// Start runs a pass at once, then one every interval, until ctx ends or
// Stop.
func (p *AuditPruner) Start(ctx context.Context) error { return p.start(ctx, p.pass) }

// Stop ends the pruner and waits for a pass in flight.
func (p *AuditPruner) Stop() { p.stop() }

func (p *AuditPruner) pass(ctx context.Context) {
	total := 0
	ok := drain(ctx, p.log, "pruning the audit log", func(ctx context.Context) (bool, error) {
		n, err := p.store.PruneAudit(ctx, p.retention, p.batch)
		total += n
		return n == p.batch, err
	})
	if !ok {
		return
	}
	p.testSignals.pruned.signal(total)
	if total > 0 {
		p.log.Info("pruned the audit log", "entries", total, "retention", p.retention.String())
	}
}

// drain runs batch after batch until one reports it was not full. An error
// ends it, logged as what failed, and drain reports false.
func drain(ctx context.Context, log *slog.Logger, what string, batch func(context.Context) (full bool, err error)) bool {
	for {
		full, err := batch(ctx)
		if err != nil {
			failed(ctx, log, what, err)
			return false
		}
		if !full {
			return true
		}
	}
}
