package graph

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
)

// follow streams what fetch finds for a job: what exists now, then more at
// every change the job's notification announces (LISTEN/NOTIFY, so any
// replica's writes reach any replica's subscribers), until the job has
// finished and everything is sent, or the subscriber leaves.
func follow[T any](ctx context.Context, q *queue.Service, log *slog.Logger, jobID uuid.UUID,
	fetch func(ctx context.Context, send func(T) bool) error, finished func(context.Context) bool) <-chan T {
	out := make(chan T, 16)
	// Watch before the first fetch: nothing between the two is missed.
	watch := q.WatchJob(jobID)
	go func() {
		defer close(out)
		defer watch.Close()
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
			if watch.Wait(ctx) != nil {
				return
			}
		}
	}()
	return out
}

// jobFinished reports whether the job is in a final state.
func (r *Resolver) jobFinished(scope record.Scope, id uuid.UUID) func(context.Context) bool {
	return func(ctx context.Context) bool {
		j, err := r.Queue.Job(ctx, scope, id)
		return err != nil || j.State.Finished()
	}
}

// followRunners sends what fetch(nil) returns, then, for each runner id
// the server announces, what fetch(&id) returns (nothing for a runner of
// another pool). When notifications may have been lost, or the pool
// changed, it sends everything again.
func followRunners(ctx context.Context, f *fleet.Service, log *slog.Logger, poolID uuid.UUID,
	fetch func(ctx context.Context, id *uuid.UUID) ([]record.Runner, error)) <-chan *record.Runner {
	out := make(chan *record.Runner, 16)
	// Watch before the first fetch: nothing between the two is missed.
	watch := f.WatchPool(poolID)
	go func() {
		defer close(out)
		defer watch.Close()
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
			if id, err = watch.Next(ctx); err != nil {
				return
			}
		}
	}()
	return out
}
