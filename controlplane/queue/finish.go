package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Finished is how one outcome of a batch went: the job's state after it,
// or store.ErrStaleAttempt (nothing of it was recorded). AlreadyRecorded:
// the same attempt's result was accepted before (this one changed
// nothing), and State is the job's now.
type Finished struct {
	State           record.JobState
	AlreadyRecorded bool
	Err             error
}

// Finisher ends attempts as their runners report them. It decides each
// outcome here, in Go, and has the store apply the decisions with one
// fenced, state-guarded statement; the store never calls back into it.
type Finisher struct {
	Store *store.Store
	// QuarantineAfter host faults in a row quarantine a runner (zero:
	// DefaultQuarantineAfter).
	QuarantineAfter int
	// Now is the clock backoffs are measured from (nil: time.Now).
	Now func() time.Time

	// afterRead, when set (by tests), runs between the read the decisions
	// rest on and the statement that applies them.
	afterRead func(ctx context.Context)
}

// Finish ends one attempt: FinishAll of one outcome. It returns how it
// went (the job's state after it); a stale outcome is the error
// store.ErrStaleAttempt.
func (f *Finisher) Finish(ctx context.Context, o record.Outcome) (Finished, error) {
	done, err := f.FinishAll(ctx, o.RunnerID, []record.Outcome{o})
	if err != nil {
		return Finished{}, err
	}
	return done[0], done[0].Err
}

// FinishAll ends attempts of one runner's jobs in one transaction, fenced:
// an outcome counts only for the runner holding the job at exactly that
// attempt, and any other is store.ErrStaleAttempt and changes nothing. Each
// accepted outcome records its run and a job event; the runner's failures
// in a row follow the outcomes in order. A batch costs a handful of
// statements whatever its size, which is what lets a runner (or many
// finishing together) report cheaply.
func (f *Finisher) FinishAll(ctx context.Context, runnerID uuid.UUID, outcomes []record.Outcome) ([]Finished, error) {
	out := make([]Finished, len(outcomes))
	err := f.Store.WithTxRetry(ctx, func(tx *store.Tx) error {
		b := &batch{runnerID: runnerID, outcomes: outcomes, out: out, now: f.now(), transitions: make([]*store.Transition, len(outcomes))}
		clear(out) // a retried transaction starts over
		ids := make([]uuid.UUID, len(outcomes))
		all := make([]int, len(outcomes))
		for i, o := range outcomes {
			all[i], ids[i] = i, o.JobID
		}
		// Read without locks: most results race nothing, and the statement
		// that applies them is guarded by what they were decided on.
		read, err := tx.ReadHeldJobs(ctx, ids)
		if err != nil {
			return err
		}
		if f.afterRead != nil {
			f.afterRead(ctx)
		}
		changed, err := b.decideAndApply(ctx, tx, all, read)
		if err != nil {
			return err
		}
		if len(changed) > 0 {
			if err := decideLocked(ctx, tx, b, changed); err != nil {
				return err
			}
		}
		return tx.CountFailures(ctx, runnerID, b.failures(), f.quarantineAfter())
	})
	if err != nil {
		return nil, fmt.Errorf("finish attempts: %w", err)
	}
	if err := f.recognise(ctx, runnerID, outcomes, out); err != nil {
		return nil, err
	}
	return out, nil
}

// recognise tells, among the stale outcomes, a result sent again after it
// was recorded (its answer lost, say) from one for an attempt the runner
// no longer holds, or one that says otherwise than what was recorded: the
// first is answered with the job's state, as it was accepted.
func (f *Finisher) recognise(ctx context.Context, runnerID uuid.UUID, outcomes []record.Outcome, out []Finished) error {
	var stale []int
	for i, o := range outcomes {
		if errors.Is(out[i].Err, store.ErrStaleAttempt) && o.RunnerID == runnerID {
			stale = append(stale, i)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	asked := make([]record.Outcome, len(stale))
	for k, i := range stale {
		asked[k] = outcomes[i]
	}
	recorded, err := f.Store.RecordedAttempts(ctx, runnerID, asked)
	if err != nil {
		return fmt.Errorf("finish attempts: %w", err)
	}
	for _, i := range stale {
		if rec, ok := recorded[outcomes[i].JobID]; ok && rec.Same(outcomes[i]) {
			out[i] = Finished{State: rec.JobState, AlreadyRecorded: true}
		}
	}
	return nil
}

// decideLocked decides again, on rows nobody can change meanwhile, the
// outcomes at changed: those whose job changed between the read and the
// update (a cancel, an expiry).
func decideLocked(ctx context.Context, tx *store.Tx, b *batch, changed []int) error {
	slices.Sort(changed)
	ids := make([]uuid.UUID, len(changed))
	for k, i := range changed {
		ids[k] = b.outcomes[i].JobID
	}
	if err := tx.LockJobs(ctx, ids); err != nil {
		return err
	}
	read, err := tx.ReadHeldJobs(ctx, ids)
	if err != nil {
		return err
	}
	again, err := b.decideAndApply(ctx, tx, changed, read)
	if err != nil {
		return err
	}
	if len(again) > 0 {
		return fmt.Errorf("%d locked jobs not updated", len(again))
	}
	return nil
}

func (f *Finisher) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Finisher) quarantineAfter() int {
	if f.QuarantineAfter > 0 {
		return f.QuarantineAfter
	}
	return DefaultQuarantineAfter
}

// batch is one FinishAll's outcomes and what was decided for them.
type batch struct {
	runnerID    uuid.UUID
	outcomes    []record.Outcome
	out         []Finished
	now         time.Time
	transitions []*store.Transition // by outcome; nil: not applied
}

// decideAndApply decides the outcomes at idx on their jobs as read, and
// has the store apply the decisions. It returns those whose job was held
// as read but changed before the update.
func (b *batch) decideAndApply(ctx context.Context, tx *store.Tx, idx []int, read []store.HeldJob) ([]int, error) {
	endings, decided := b.decide(idx, read)
	if len(endings) == 0 {
		return nil, nil
	}
	ended, err := tx.EndAttempts(ctx, b.runnerID, endings)
	if err != nil {
		return nil, err
	}
	var changed []int
	for id, i := range decided {
		if e, ok := ended[id]; ok {
			b.out[i].State = e.State
			continue
		}
		b.transitions[i] = nil
		changed = append(changed, i)
	}
	return changed, nil
}

// decide fences and decides the outcomes at idx on their jobs as read. An
// outcome for a job the runner does not hold at exactly that attempt is
// stale. It returns the endings to apply and, by job, the outcome each
// came from.
func (b *batch) decide(idx []int, read []store.HeldJob) ([]store.Ending, map[uuid.UUID]int) {
	held := make(map[uuid.UUID]store.HeldJob, len(read))
	for _, h := range read {
		held[h.ID] = h
	}
	// Sized for every outcome deciding, as nearly all do: a batch of
	// hundreds grows no slice or map on the way, and its transitions
	// share one array.
	endings := make([]store.Ending, 0, len(idx))
	decided := make(map[uuid.UUID]int, len(idx))
	transitions := make([]store.Transition, 0, len(idx))
	for _, i := range idx {
		o := b.outcomes[i]
		h, ok := held[o.JobID]
		if !ok || !holds(h, b.runnerID, o) {
			b.out[i].Err = store.ErrStaleAttempt
			continue
		}
		// The same attempt twice in a batch: the first ends it.
		delete(held, o.JobID)
		t := Decide(o, h, b.now)
		transitions = append(transitions, t)
		b.transitions[i] = &transitions[len(transitions)-1]
		decided[o.JobID] = i
		endings = append(endings, store.Ending{Outcome: o, Transition: t, CancelRequested: h.CancelRequested})
	}
	return endings, decided
}

// holds is the fence: the outcome is the runner's, for the attempt its job
// is at, while the job is held.
func holds(h store.HeldJob, runnerID uuid.UUID, o record.Outcome) bool {
	return o.RunnerID == runnerID && h.Attempt == o.Attempt && h.RunnerID != nil && *h.RunnerID == runnerID &&
		(h.State == record.JobLeased || h.State == record.JobRunning)
}

// failures is what the applied outcomes do to the runner's failures in a
// row, in order (see store.CountFailures): a counted host fault each, and
// one reset for a run of outcomes between them that are not.
func (b *batch) failures() []bool {
	var seq []bool
	pendingReset := false
	for _, t := range b.transitions {
		switch {
		case t == nil:
		case !t.CountsAsHostFault:
			pendingReset = true
		default:
			if pendingReset {
				seq = append(seq, false)
				pendingReset = false
			}
			seq = append(seq, true)
		}
	}
	if pendingReset {
		seq = append(seq, false)
	}
	return seq
}
