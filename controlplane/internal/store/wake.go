package store

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// A job given back with a backoff (its lease expired, its runner reported
// a host fault) is QUEUED at once but may be leased only from its
// available_at. The notification sent when it comes back wakes its pool's
// long-polls, and their claims pass over it; nothing else would end their
// waits before their own deadlines (up to runnerapi.MaxWaitSeconds), so
// the job could sit out that long after its backoff with runners idle.
// wakeWhenAvailable wakes the pool again when the backoff ends.
//
// The replica that gave the job back keeps the wake in memory: if it stops
// first, the long-polls' deadlines bound the wait, as before.

// wakeGrain coalesces a pool's wakes: backoffs that end within one grain
// share a notification, sent at the grain's end.
const wakeGrain = 100 * time.Millisecond

type wakeKey struct {
	pool uuid.UUID
	at   int64 // the grain's end, in Unix nanoseconds
}

type wakes struct {
	mu      sync.Mutex
	pending map[wakeKey]bool
}

// wakeWhenAvailable wakes pool's long-polls at at, once the transaction
// has committed (at once on the pool). A time not in the future needs no
// wake: the notification of the job's return did it.
func (s *Querier) wakeWhenAvailable(pool uuid.UUID, at *time.Time) {
	if at == nil || !at.After(time.Now()) {
		return
	}
	sh, when := s.sh, *at
	s.AfterCommit(func() { sh.wakeAt(pool, when) })
}

func (sh *shared) wakeAt(pool uuid.UUID, at time.Time) {
	end := at.Truncate(wakeGrain)
	if end.Before(at) {
		end = end.Add(wakeGrain)
	}
	k := wakeKey{pool, end.UnixNano()}
	sh.wakes.mu.Lock()
	defer sh.wakes.mu.Unlock()
	if sh.wakes.pending[k] {
		return
	}
	if sh.wakes.pending == nil {
		sh.wakes.pending = map[wakeKey]bool{}
	}
	sh.wakes.pending[k] = true
	time.AfterFunc(time.Until(end), func() {
		sh.wakes.mu.Lock()
		delete(sh.wakes.pending, k)
		sh.wakes.mu.Unlock()
		sh.send(map[string][]string{ChannelJobs: {pool.String()}})
	})
}
