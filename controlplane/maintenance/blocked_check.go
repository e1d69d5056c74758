package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// BlockedCheckIntervalDefault is the blocked check's pace. Its rule waits
// on the fleet, which changes in minutes, not seconds.
const BlockedCheckIntervalDefault = 10 * time.Second

// BlockedCheckConfig configures a BlockedCheck.
type BlockedCheckConfig struct {
	// Interval between checks (0: BlockedCheckIntervalDefault).
	Interval time.Duration
	// Batch is how many jobs a check blocks, and how many it unblocks, at
	// most (0: store.DefaultMaintenanceBatch).
	Batch int
	Log   *slog.Logger
}

// BlockedCheck marks BLOCKED, with the reason, the queued jobs that no
// approved runner of their pool could ever hold, even empty, and sends
// blocked jobs back to the queue once one could.
type BlockedCheck struct {
	loop
	store *store.Store
	log   *slog.Logger
	batch int
	paces placeabilityChecks // only the loop's goroutine touches it

	testSignals blockedCheckTestSignals
}

type blockedCheckTestSignals struct {
	checked testSignal[blockedCheckPass] // a check ended, having done this
}

func (ts *blockedCheckTestSignals) init() { ts.checked.init() }

type blockedCheckPass struct {
	Whole     bool // it read the whole queue, not only recent jobs
	Blocked   store.Blocked
	Unblocked int
}

// NewBlockedCheck returns a blocked check over s; Start starts it.
func NewBlockedCheck(s *store.Store, cfg BlockedCheckConfig) *BlockedCheck {
	return &BlockedCheck{
		loop:  loop{name: "blocked check", interval: orDefault(cfg.Interval, BlockedCheckIntervalDefault)},
		store: s,
		log:   orDiscard(cfg.Log).With("component", "blocked_check"),
		batch: orDefault(cfg.Batch, store.DefaultMaintenanceBatch),
	}
}

// Start runs a check at once, then one every interval, until ctx ends or
// Stop.
func (c *BlockedCheck) Start(ctx context.Context) error { return c.start(ctx, c.check) }

// Stop ends the check and waits for one in flight.
func (c *BlockedCheck) Stop() { c.stop() }

func (c *BlockedCheck) check(ctx context.Context) {
	start, since := time.Now(), c.paces.since()
	blocked, err := c.store.BlockUnplaceable(ctx, since, c.batch)
	if err != nil {
		failed(ctx, c.log, "checking for blocked jobs", err)
		return
	}
	c.paces.done(start, !blocked.Cut)
	unblocked, err := c.store.UnblockPlaceable(ctx, c.batch)
	if err != nil {
		failed(ctx, c.log, "checking for blocked jobs", err)
		return
	}
	// The waits the claims record, with the placement they steer: those
	// of runners that stopped asking without a word are dropped here.
	if _, err := c.store.PruneWaits(ctx); err != nil {
		// The check itself is done; the waits are dropped next time.
		failed(ctx, c.log, "dropping ended waits", err)
	}
	c.testSignals.checked.signal(blockedCheckPass{Whole: since.IsZero(), Blocked: blocked, Unblocked: unblocked})
	if blocked.Blocked+unblocked > 0 {
		c.log.Info("checked for blocked jobs", "blocked", blocked.Blocked, "unblocked", unblocked, "whole_queue", since.IsZero())
	}
}

// placeabilityChecks paces the blocked check. Reading every queued job
// costs in proportion to the queue, so most checks read only the jobs
// submitted since the last one, and every wholeEvery one reads them all: a
// job already queued becomes unplaceable only when the fleet changes (a
// runner leaves, or its labels or kinds change), which that catches within
// minutes.
type placeabilityChecks struct {
	checkedBefore time.Time // jobs submitted before this have been checked
	sinceWhole    int
}

// wholeEvery: one blocked check in this many reads the whole queue (every
// five minutes at the default interval).
const wholeEvery = 30

// slack covers a submission whose transaction was still open when a check
// began, and clocks that disagree by less.
const slack = time.Minute

// wholeDue reports whether the next check reads the whole queue.
func (p *placeabilityChecks) wholeDue() bool {
	return p.checkedBefore.IsZero() || p.sinceWhole >= wholeEvery
}

// since is where the next check begins (zero: everything).
func (p *placeabilityChecks) since() time.Time {
	if p.wholeDue() {
		return time.Time{}
	}
	return p.checkedBefore
}

// done records a check that began at start and succeeded; complete is
// false when it stopped at its batch size and left jobs unread.
func (p *placeabilityChecks) done(start time.Time, complete bool) {
	if !complete {
		return
	}
	if p.wholeDue() {
		p.sinceWhole = 0
	}
	p.sinceWhole++
	p.checkedBefore = start.Add(-slack)
}
