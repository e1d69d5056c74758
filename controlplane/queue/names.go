package queue

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// names keeps the names of pools and the handles of organisations that
// leases carry, for a while: a lease answer would otherwise read them
// again every time, and a rename may take namesTTL to show on a runner's
// metrics.
type names struct {
	st   *store.Store
	mu   sync.Mutex
	seen map[uuid.UUID]named // pools and organisations, by id
}

type named struct {
	name string
	at   time.Time
}

const namesTTL = time.Minute

func newNames(st *store.Store) *names { return &names{st: st, seen: map[uuid.UUID]named{}} }

// of returns the names of the pools and organisations ids (missing ones:
// ""), reading those it does not hold, or holds too long, in one statement
// each.
func (n *names) of(ctx context.Context, pools, orgs []uuid.UUID) map[uuid.UUID]string {
	out := make(map[uuid.UUID]string, len(pools)+len(orgs))
	stale := func(ids []uuid.UUID) []uuid.UUID {
		var missing []uuid.UUID
		for _, id := range ids {
			if e, ok := n.seen[id]; ok && time.Since(e.at) < namesTTL {
				out[id] = e.name
			} else if _, dup := out[id]; !dup {
				missing = append(missing, id)
			}
		}
		return missing
	}
	n.mu.Lock()
	missingPools, missingOrgs := stale(pools), stale(orgs)
	n.mu.Unlock()
	now := time.Now()
	found := map[uuid.UUID]string{}
	if len(missingPools) > 0 {
		if ps, err := n.st.PoolsByID(ctx, record.AllOrganisations(), missingPools); err == nil {
			for id, p := range ps {
				found[id] = p.Name
			}
		}
	}
	if len(missingOrgs) > 0 {
		if byID, err := n.st.OrganisationsByID(ctx, record.AllOrganisations(), missingOrgs); err == nil {
			for id, o := range byID {
				found[id] = o.Name
			}
		}
	}
	n.mu.Lock()
	for id, name := range found {
		n.seen[id] = named{name: name, at: now}
		out[id] = name
	}
	n.mu.Unlock()
	return out
}
