package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
)

// LeaseRescuerIntervalDefault is the lease rescuer's pace: a lease is taken
// back within it of running out.
const LeaseRescuerIntervalDefault = time.Second

// LeaseRescuerConfig configures a LeaseRescuer.
type LeaseRescuerConfig struct {
	// Interval between passes (0: LeaseRescuerIntervalDefault).
	Interval time.Duration
	// Batch is how many expired leases a pass takes at most (0:
	// store.DefaultMaintenanceBatch); the rest wait for the next pass.
	Batch int
	Log   *slog.Logger
}

// LeaseRescuer takes back the leases whose runners stopped heartbeating
// them. Policy (queue.DecideExpiredLease) sends each job back to the queue
// after a backoff, or fails it after its last try; the store applies that
// in the transaction that locked the job, so the rescuers of several
// replicas never take back the same lease twice.
type LeaseRescuer struct {
	loop
	store *store.Store
	log   *slog.Logger
	batch int

	testSignals leaseRescuerTestSignals
}

type leaseRescuerTestSignals struct {
	rescued  testSignal[store.RescuedLeases] // a pass ended, having done this
	credited testSignal[leaseCredit]         // a pass gave held leases time back
}

func (ts *leaseRescuerTestSignals) init() { ts.rescued.init(); ts.credited.init() }

// leaseCredit is what a pass gave back after a gap: credit to each of
// leases held leases.
type leaseCredit struct {
	Gap, Credit time.Duration
	Leases      int
}

// clockDuty names the rescuer's passes on the maintenance clock.
const clockDuty = "lease_rescuer"

// NewLeaseRescuer returns a lease rescuer over s; Start starts it.
func NewLeaseRescuer(s *store.Store, cfg LeaseRescuerConfig) *LeaseRescuer {
	return &LeaseRescuer{
		loop:  loop{name: "lease rescuer", interval: orDefault(cfg.Interval, LeaseRescuerIntervalDefault)},
		store: s,
		log:   orDiscard(cfg.Log).With("component", "lease_rescuer"),
		batch: orDefault(cfg.Batch, store.DefaultMaintenanceBatch),
	}
}

// Start runs a pass at once, then one every interval, until ctx ends or
// Stop.
func (r *LeaseRescuer) Start(ctx context.Context) error { return r.start(ctx, r.pass) }

// Stop ends the rescuer and waits for a pass in flight.
func (r *LeaseRescuer) Stop() { r.stop() }

func (r *LeaseRescuer) pass(ctx context.Context) {
	res, err := r.rescue(ctx)
	if err != nil {
		failed(ctx, r.log, "rescuing expired leases", err)
		return
	}
	r.testSignals.rescued.signal(res)
	if res != (store.RescuedLeases{}) {
		r.log.Info("rescued expired leases", "requeued", res.Requeued, "failed", res.Failed, "not_delivered", res.Undelivered)
	}
}

// rescue takes back one batch of expired leases. First, after a gap since
// the last pass of any replica (the database could not be reached, or no
// replica ran), it gives the leases held when the gap began their time
// back (queue.OutageCredit): their runners could not heartbeat them.
func (r *LeaseRescuer) rescue(ctx context.Context) (store.RescuedLeases, error) {
	var res store.RescuedLeases
	var credit leaseCredit
	err := r.store.WithTx(ctx, func(tx *store.Tx) error {
		tick, err := tx.TickMaintenanceClock(ctx, clockDuty)
		if err != nil {
			return err
		}
		credit = leaseCredit{Gap: tick.Gap(), Credit: queue.OutageCredit(tick.Gap(), r.interval)}
		if credit.Credit > 0 {
			if credit.Leases, err = tx.CreditLeases(ctx, tick.Previous, credit.Credit); err != nil {
				return err
			}
		}
		expired, err := tx.ExpiredLeases(ctx, nil, r.batch)
		if err != nil || len(expired) == 0 {
			return err
		}
		now := time.Now()
		var rescues []store.LeaseRescue
		unheard := map[uuid.UUID][]record.Job{} // by runner
		for _, j := range expired {
			if j.Unheard && j.RunnerID != nil {
				unheard[*j.RunnerID] = append(unheard[*j.RunnerID], j.Job)
				continue
			}
			rescues = append(rescues, store.LeaseRescue{Job: j.Job, Transition: queue.DecideExpiredLease(j.Job, now)})
		}
		for runner, jobs := range unheard {
			n, err := tx.ReturnUndelivered(ctx, runner, jobs, "its runner heartbeated through the lease without naming it")
			if err != nil {
				return err
			}
			res.Undelivered += n
		}
		rescued, err := tx.RescueLeases(ctx, rescues)
		res.Requeued, res.Failed = rescued.Requeued, rescued.Failed
		return err
	})
	if err != nil {
		return store.RescuedLeases{}, fmt.Errorf("rescue expired leases: %w", err)
	}
	if credit.Credit > 0 {
		r.log.Warn("gave held leases their time back after a gap in which no replica reached the database",
			"gap", credit.Gap.Round(time.Millisecond), "credit", credit.Credit.Round(time.Millisecond), "leases", credit.Leases)
		r.testSignals.credited.signal(credit)
	}
	return res, nil
}
