package graph

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/store"
)

// follow streams what fetch finds for a job: what exists now, then more at
// every change the job's notification announces (LISTEN/NOTIFY, so any
// replica's writes reach any replica's subscribers), until the job has
// finished and everything is sent, or the subscriber leaves.
func follow[T any](ctx context.Context, l *store.Listener, log *slog.Logger, jobID uuid.UUID,
	fetch func(ctx context.Context, send func(T) bool) error, finished func(context.Context) bool) <-chan T {
	out := make(chan T, 16)
	// Subscribe before the first fetch: nothing between the two is missed.
	sub := l.Subscribe(store.ChannelJobChanges)
	go func() {
		defer close(out)
		defer sub.Close()
		send := func(v T) bool {
			select {
			case out <- v:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			done := finished(ctx)
			if err := fetch(ctx, send); err != nil {
				if ctx.Err() == nil {
					log.Error("subscription fetch", "job_id", jobID, "err", err)
				}
				return
			}
			// Finished before the fetch: the fetch saw the last of it.
			if done || ctx.Err() != nil {
				return
			}
			for waiting := true; waiting; {
				select {
				case <-ctx.Done():
					return
				case p := <-sub.C:
					waiting = p != "" && !store.JobChanged(p, jobID.String())
				}
			}
		}
	}()
	return out
}

// jobFinished reports whether the job is in a final state.
func (r *Resolver) jobFinished(scope store.Scope, id uuid.UUID) func(context.Context) bool {
	return func(ctx context.Context) bool {
		j, err := r.Store.Job(ctx, scope, id)
		return err != nil || j.State.Finished()
	}
}

// followRunners sends what fetch(nil) returns, then, for each runner id
// the server announces, what fetch(&id) returns (nothing for a runner of
// another pool). After a reconnect of the listener, when notifications may
// have been lost, it sends everything again.
func followRunners(ctx context.Context, l *store.Listener, log *slog.Logger, poolID uuid.UUID,
	fetch func(ctx context.Context, id *uuid.UUID) ([]store.Runner, error)) <-chan *store.Runner {
	out := make(chan *store.Runner, 16)
	// Subscribe before the first fetch: nothing between the two is missed.
	sub := l.Subscribe(store.ChannelRunnerStatus)
	go func() {
		defer close(out)
		defer sub.Close()
		var id *uuid.UUID
		for {
			runners, err := fetch(ctx, id)
			if err != nil {
				if ctx.Err() == nil {
					log.Error("runnerEvents fetch", "pool_id", poolID, "err", err)
				}
				return
			}
			for i := range runners {
				select {
				case out <- &runners[i]:
				case <-ctx.Done():
					return
				}
			}
			if id, err = nextRunner(ctx, sub, poolID); err != nil {
				return
			}
		}
	}()
	return out
}

// nextRunner waits for a notification about a runner: its id, or nil when
// everything must be read again: notifications may have been missed, or
// the pool itself changed (its lease is every runner's).
func nextRunner(ctx context.Context, sub *store.Subscription, poolID uuid.UUID) (*uuid.UUID, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case p := <-sub.C:
			if p == "" || p == store.PoolChanged+poolID.String() {
				return nil, nil
			}
			// Other pools' payloads are not about this pool's runners.
			if id, err := uuid.Parse(p); err == nil {
				return &id, nil
			}
		}
	}
}
