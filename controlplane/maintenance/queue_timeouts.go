package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// QueueTimeoutsIntervalDefault is the queue timeouts' pace: their rule
// works in hours, and each pass reads the whole queue.
const QueueTimeoutsIntervalDefault = time.Minute

// QueueTimeoutsConfig configures QueueTimeouts.
type QueueTimeoutsConfig struct {
	// Interval between passes (0: QueueTimeoutsIntervalDefault).
	Interval time.Duration
	// DefaultQueueTimeoutHours is the timeout of pools that set none.
	DefaultQueueTimeoutHours int
	// Batch is how many jobs a pass expires at most (0:
	// store.DefaultMaintenanceBatch); the rest wait for the next pass.
	Batch int
	Log   *slog.Logger
}

// QueueTimeouts ends as EXPIRED the jobs that waited in the queue (QUEUED
// or BLOCKED) longer than their pool's queue timeout in force.
type QueueTimeouts struct {
	loop
	store        *store.Store
	log          *slog.Logger
	defaultHours int
	batch        int

	testSignals queueTimeoutsTestSignals
}

type queueTimeoutsTestSignals struct {
	expired testSignal[int] // a pass ended, having expired this many jobs
}

func (ts *queueTimeoutsTestSignals) init() { ts.expired.init() }

// NewQueueTimeouts returns queue timeouts over s; Start starts them.
func NewQueueTimeouts(s *store.Store, cfg QueueTimeoutsConfig) *QueueTimeouts {
	return &QueueTimeouts{
		loop:         loop{name: "queue timeouts", interval: orDefault(cfg.Interval, QueueTimeoutsIntervalDefault)},
		store:        s,
		log:          orDiscard(cfg.Log).With("component", "queue_timeouts"),
		defaultHours: cfg.DefaultQueueTimeoutHours,
		batch:        orDefault(cfg.Batch, store.DefaultMaintenanceBatch),
	}
}

// Start runs a pass at once, then one every interval, until ctx ends or
// Stop. It refuses a default timeout that is not positive, which would
// expire every job of the pools that set none.
func (q *QueueTimeouts) Start(ctx context.Context) error {
	if q.defaultHours <= 0 {
		return fmt.Errorf("start queue timeouts: default queue timeout of %d hours", q.defaultHours)
	}
	return q.start(ctx, q.pass)
}

// Stop ends the queue timeouts and waits for a pass in flight.
func (q *QueueTimeouts) Stop() { q.stop() }

func (q *QueueTimeouts) pass(ctx context.Context) {
	n, err := q.store.ExpireTimedOut(ctx, nil, q.defaultHours, q.batch)
	if err != nil {
		failed(ctx, q.log, "expiring jobs past their queue timeout", err)
		return
	}
	q.testSignals.expired.signal(n)
	if n > 0 {
		q.log.Info("expired jobs past their queue timeout", "jobs", n)
	}
}
