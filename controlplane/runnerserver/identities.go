package runnerserver

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/store"
)

// identities caches what the handshake and every request check: a
// certificate's standing, and the runner it names with its inventory. At
// thousands of heartbeats a second the check must not be a query each.
// The replica that revokes empties its cache before it answers; every other
// replica empties its own on the LISTEN/NOTIFY broadcast that the same
// commit sends, milliseconds later. The TTL bounds staleness if a
// notification were ever lost.
type identities struct {
	store *store.Store
	ttl   time.Duration

	mu      sync.Mutex // guards entries and gen
	entries map[string]identity
	gen     uint64 // bumped by forget; a fetch that raced it is not cached
}

type identity struct {
	standing  store.CertificateStanding
	runner    store.Runner
	inventory *fleet.Inventory
	at        time.Time
}

func newIdentities(s *store.Store) *identities {
	return &identities{store: s, ttl: 5 * time.Minute, entries: map[string]identity{}}
}

// lookup returns the standing of serial and, when it is usable, its runner.
func (c *identities) lookup(ctx context.Context, serial string, runnerID uuid.UUID) (identity, error) {
	c.mu.Lock()
	e, ok := c.entries[serial]
	gen := c.gen
	c.mu.Unlock()
	// An entry made at the handshake may lack the runner a request needs.
	if ok && time.Since(e.at) < c.ttl && (runnerID == uuid.Nil || e.runner.ID == runnerID || !e.standing.Usable()) {
		return e, nil
	}
	st, err := c.store.StandingOf(ctx, serial)
	if err != nil {
		return identity{}, err
	}
	e = identity{standing: st, at: time.Now()}
	if st.Usable() && runnerID != uuid.Nil {
		r, err := c.store.Runner(ctx, store.AllOrganisations(), runnerID)
		if err != nil {
			return identity{}, err
		}
		inv, err := fleet.ParseInventory(r.Inventory)
		if err != nil {
			return identity{}, err
		}
		e.runner, e.inventory = r, inv
	}
	c.mu.Lock()
	if c.gen == gen {
		c.entries[serial] = e
	}
	c.mu.Unlock()
	return e, nil
}

// forget empties the cache.
func (c *identities) forget() {
	c.mu.Lock()
	c.gen++
	clear(c.entries)
	c.mu.Unlock()
}

// watch forgets on every runner change and revocation until ctx ends.
func (c *identities) watch(ctx context.Context, l *store.Listener) {
	runners := l.Subscribe(store.ChannelRunnerStatus)
	defer runners.Close()
	revocations := l.Subscribe(store.ChannelRevocations)
	defer revocations.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-runners.C:
		case <-revocations.C:
		}
		c.forget()
	}
}
