package maintenance

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

// testBundle is a database of the test's own with an organisation and a
// pool, and the job events its store wrote, by type, once committed (what
// /metrics counts).
type testBundle struct {
	db     *pgxpool.Pool
	store  *store.Store
	pool   record.Pool
	mu     *sync.Mutex
	events map[string]int
}

func setup(t *testing.T) testBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.NewPool(t)
	s := store.New(db)
	org, err := s.CreateOrganisation(ctx, "org")
	require.NoError(t, err)
	p, err := s.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu"})
	require.NoError(t, err)
	b := testBundle{db: db, store: s, pool: p, mu: &sync.Mutex{}, events: map[string]int{}}
	s.OnJobEvents(func(typ string, n int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.events[typ] += n
	})
	return b
}

// counted is how many job events of typ the store wrote.
func (b testBundle) counted(typ string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.events[typ]
}

// runner adds an approved runner of the pool with cores, memory and GPUs.
func (b testBundle) runner(t *testing.T, cores float64, memMiB int64, gpus int) uuid.UUID {
	t.Helper()
	return storetest.ApprovedRunner(t, b.store, b.pool.ID, cores, memMiB, gpus)
}

func (b testBundle) submit(t *testing.T, c record.Claim, mods ...func(*store.NewJob)) record.Job {
	t.Helper()
	n := store.NewJob{PoolID: b.pool.ID, Image: "busybox", Command: []string{"true"}, Claim: c, MaxAttempts: 3, Kind: "default"}
	for _, m := range mods {
		m(&n)
	}
	j, _, err := b.store.SubmitJob(context.Background(), record.AllOrganisations(), n)
	require.NoError(t, err)
	return j
}

// claim leases r's next job.
func (b testBundle) claim(t *testing.T, r uuid.UUID) record.Job {
	t.Helper()
	big := record.Claim{Cores: 1e6, MemoryMiB: 1 << 40, GPUs: 64}
	j, ok, err := b.store.ClaimJob(context.Background(), record.ClaimRequest{RunnerID: r, Kinds: []string{"default"}, Free: big, Largest: big,
		DefaultLeaseSeconds: 30})
	require.NoError(t, err)
	require.True(t, ok, "nothing to lease")
	return j
}

// expire lets the leases of jobs run out.
func (b testBundle) expire(t *testing.T, jobs ...uuid.UUID) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1)`, jobs)
	require.NoError(t, err)
}

func (b testBundle) job(t *testing.T, id uuid.UUID) record.Job {
	t.Helper()
	j, err := b.store.Job(context.Background(), record.AllOrganisations(), id)
	require.NoError(t, err)
	return j
}

// eventTypes are the types of the job's events, oldest first.
func (b testBundle) eventTypes(t *testing.T, id uuid.UUID) []string {
	t.Helper()
	events, err := b.store.JobEvents(context.Background(), id, 0)
	require.NoError(t, err)
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	return types
}

func (b testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// wakes subscribes to the wake-ups of runners waiting for work.
func (b testBundle) wakes(t *testing.T) *store.Subscription {
	t.Helper()
	l := store.NewListener(b.db, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	<-l.Ready()
	sub := l.Subscribe(store.ChannelJobs)
	t.Cleanup(sub.Close)
	return sub
}

// wokePool waits for a wake-up naming the bundle's pool.
func (b testBundle) wokePool(t *testing.T, sub *store.Subscription) {
	t.Helper()
	select {
	case p := <-sub.C:
		require.Equal(t, b.pool.ID.String(), p)
	case <-time.After(signalTimeout):
		t.Fatal("no wake-up for the pool")
	}
}

// started starts svc for the test, and stops it when the test ends.
func started(t *testing.T, svc Service) {
	t.Helper()
	require.NoError(t, svc.Start(context.Background()))
	t.Cleanup(svc.Stop)
}
