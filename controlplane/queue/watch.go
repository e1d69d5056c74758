package queue

import (
	"context"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
)

// JobWatch tells when a job may have changed: a new event or new output,
// written by any replica.
type JobWatch struct {
	sub *store.Subscription
	id  string
}

// WatchJob starts watching a job. Start before reading what you wait on,
// or a change between the read and the start is missed. Close it when
// done.
func (s *Service) WatchJob(id uuid.UUID) *JobWatch {
	return &JobWatch{sub: s.listener.Subscribe(store.ChannelJobChanges), id: id.String()}
}

// Wait returns nil once the job may have changed since the last Wait (or
// the start), and ctx's error if ctx ends first. After a reconnect of the
// listener, when changes may have gone unheard, it returns at once.
func (w *JobWatch) Wait(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-w.sub.C:
			if p == "" || store.JobChanged(p, w.id) {
				return nil
			}
		}
	}
}

// Close stops the watch.
func (w *JobWatch) Close() { w.sub.Close() }
