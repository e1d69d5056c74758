package enrolment

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// identities caches what the handshake and every request check: a
// certificate's standing, and the runner it names with its inventory. At
// thousands of heartbeats a second the check must not be a query each.
// A change drops what it names: the runner's entries, a pool's runners'
// entries, or a revoked serial's. The replica that made it drops them
// before it answers (store.OnRunnerChange), every other one when the
// LISTEN/NOTIFY broadcast of the same commit arrives, milliseconds later.
// Only a broadcast that names nothing it can read (after the listener
// reconnects) empties the whole cache: before, every enrolment, approval
// or quarantine did, and each of thousands of runners then cost two
// queries again. The TTL bounds staleness if a notification were ever
// lost.
type identities struct {
	store *store.Store
	ttl   time.Duration

	mu      sync.Mutex // guards entries and gen
	entries map[string]identity
	gen     uint64 // bumped by forget; a fetch that raced it is not cached
}

type identity struct {
	standing store.CertificateStanding
	runner   record.Runner // with its inventory
	at       time.Time
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
		r, err := c.store.Runner(ctx, record.AllOrganisations(), runnerID)
		if err != nil {
			return identity{}, err
		}
		e.runner = r
	}
	c.mu.Lock()
	if c.gen == gen {
		c.entries[serial] = e
	}
	c.mu.Unlock()
	return e, nil
}

// forget empties the cache.
func (c *identities) forget() { c.forgetIf(func(string, identity) bool { return true }) }

// forgetIf drops the entries drop says to. A lookup that raced it does not
// cache what it read (gen).
func (c *identities) forgetIf(drop func(serial string, e identity) bool) {
	c.mu.Lock()
	c.gen++
	for serial, e := range c.entries {
		if drop(serial, e) {
			delete(c.entries, serial)
		}
	}
	c.mu.Unlock()
}

// heard drops what a notification on channel names: on ChannelRunnerStatus
// a runner id, or a pool id after store.PoolChanged; on ChannelRevocations
// a serial. Anything else empties the cache.
func (c *identities) heard(channel, payload string) {
	switch {
	case channel == store.ChannelRevocations && payload != "":
		c.mu.Lock()
		c.gen++
		delete(c.entries, payload) // entries are by serial
		c.mu.Unlock()
	case channel == store.ChannelRunnerStatus && strings.HasPrefix(payload, store.PoolChanged):
		pool, err := uuid.Parse(strings.TrimPrefix(payload, store.PoolChanged))
		if err != nil {
			c.forget()
			return
		}
		// An entry without its runner read holds nothing of the pool.
		c.forgetIf(func(_ string, e identity) bool { return e.runner.PoolID == pool })
	case channel == store.ChannelRunnerStatus:
		id, err := uuid.Parse(payload)
		if err != nil {
			c.forget()
			return
		}
		c.forgetIf(func(_ string, e identity) bool {
			return e.runner.ID == id || (e.standing.RunnerID != nil && *e.standing.RunnerID == id)
		})
	default:
		c.forget()
	}
}

// watch drops what every runner change and revocation names until ctx
// ends.
func (c *identities) watch(ctx context.Context, l *store.Listener) {
	runners := l.Subscribe(store.ChannelRunnerStatus)
	defer runners.Close()
	revocations := l.Subscribe(store.ChannelRevocations)
	defer revocations.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-runners.C:
			c.heard(store.ChannelRunnerStatus, p)
		case p := <-revocations.C:
			c.heard(store.ChannelRevocations, p)
		}
	}
}
