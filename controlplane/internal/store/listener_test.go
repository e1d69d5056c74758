package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// listening is a listener on db, running until ctx ends.
func listening(ctx context.Context, db *pgxpool.Pool) *store.Listener {
	l := store.NewListener(db, slog.New(slog.DiscardHandler))
	go l.Run(ctx)
	<-l.Ready()
	return l
}

// wakesPool waits for the wake-up of pool on sub (ChannelJobs).
func wakesPool(t *testing.T, sub *store.Subscription, pool uuid.UUID) {
	t.Helper()
	select {
	case p := <-sub.C:
		require.Equal(t, pool.String(), p, "the wake-up names the pool")
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up for the pool")
	}
}

// wakesNobody fails the test if a wake-up comes on sub within 300 ms:
// why is what the runner that stopped did, for the message.
func wakesNobody(t *testing.T, sub *store.Subscription, why string) {
	t.Helper()
	select {
	case p := <-sub.C:
		t.Fatalf("a wake-up (%q) from a runner that %s", p, why)
	case <-time.After(300 * time.Millisecond):
	}
}

// drain reads sub until it is quiet for 300 ms.
func drain(s *store.Subscription) {
	for {
		select {
		case <-s.C:
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
}

// A subscriber that falls behind must not miss a change for good: what
// overflows its buffer turns into "", the signal to re-read everything.
func TestASlowSubscriberIsToldToReadEverything(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := storetest.NewPool(t)
	l := listening(ctx, pool)
	sub := l.Subscribe(store.ChannelRunnerStatus)
	defer sub.Close()
	marks := l.Subscribe(store.ChannelJobs)
	defer marks.Close()

	const sent = 40
	for i := range sent {
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", store.ChannelRunnerStatus, fmt.Sprint(i))
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, "SELECT pg_notify($1, 'mark')", store.ChannelJobs)
	require.NoError(t, err)
	// Read nothing while the listener takes them in: 40 overflow a buffer
	// of 16. The listener hands out notifications in the order they come,
	// so once the mark sent after them arrives, all 40 were handed out.
	// Then the last one is there, or has given way to "".
	select {
	case p := <-marks.C:
		require.Equal(t, "mark", p)
	case <-time.After(10 * time.Second):
		t.Fatal("the mark did not come")
	}
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) == 0 || (got[len(got)-1] != "" && got[len(got)-1] != fmt.Sprint(sent-1)) {
		select {
		case p := <-sub.C:
			got = append(got, p)
		case <-deadline:
			t.Fatalf("got %q", got)
		}
	}
	require.Contains(t, got, "", "an overflow must say so: %q", got)
}

func TestJobChangedReadsPackedIDs(t *testing.T) {
	t.Parallel()
	a, b := "01a22cc5-1bf3-7bfb-8db5-7b155b01253f", "01a22cc5-1bf3-7bfb-8db5-7b155b01253e"
	for _, c := range []struct {
		payload string
		want    bool
	}{{a, true}, {b + "," + a, true}, {a + "," + b, true}, {b, false}, {"", false}, {a[:35], false}, {a + "x," + b, false}} {
		if got := store.JobChanged(c.payload, a); got != c.want {
			t.Errorf("JobChanged(%q) = %v", c.payload, got)
		}
	}
}

// A transaction's job changes go out together, packed: a sweep that takes
// back 250 leases sends two notifications, not 250 (which would also
// overflow a subscriber). Its wake-up for the pool goes in the same
// statement, on its own channel.
func TestASweepNotifiesItsJobChangesPacked(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := jobsSetup(t)
	r := b.runner(t, 1e5, 1<<30, 0)
	const jobs = 250
	claimed := b.leased(t, r, jobs)

	l := listening(ctx, b.db)
	sub := l.Subscribe(store.ChannelJobChanges)
	defer sub.Close()
	work := l.Subscribe(store.ChannelJobs)
	defer work.Close()
	later := time.Now().Add(time.Hour)
	res, err := b.sweep(ctx, sweepOptions{Now: &later, DefaultQueueTimeoutHours: 24, LeasesOnly: true})
	require.NoError(t, err)
	require.Equal(t, jobs, res.Requeued)

	var got []string
	ids := map[string]bool{}
	for len(ids) < jobs {
		select {
		case p := <-sub.C:
			require.NotEmpty(t, p, "no overflow")
			got = append(got, p)
			for id := range strings.SplitSeq(p, ",") {
				ids[id] = true
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d notifications, %d ids", len(got), len(ids))
		}
	}
	require.Len(t, got, 2)
	for _, j := range claimed {
		require.True(t, ids[j.ID.String()])
	}
	wakesPool(t, work, b.pool.ID)
}

// A result that requeues its job wakes the runners waiting on its pool,
// naming the pool, once committed.
func TestARequeuingResultWakesItsPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	leased := b.leased(t, r, 1)

	l := listening(ctx, b.db)
	work := l.Subscribe(store.ChannelJobs)
	defer work.Close()
	reason := "host went away"
	o := record.Outcome{JobID: leased[0].ID, Attempt: 1, RunnerID: r, ReturnReason: &reason, HostFault: true}
	ended, err := b.store.EndAttempts(ctx, r, []store.Ending{{Outcome: o, Transition: store.Transition{State: record.JobQueued}}})
	require.NoError(t, err)
	require.Equal(t, record.JobQueued, ended[o.JobID].State)
	wakesPool(t, work, b.pool.ID)
}

// A change to a runner's standing reaches this replica's hooks with what
// it names, and other replicas by NOTIFY with the same, once committed:
// the runner for a change of it, the pool for a change of its settings,
// the serial for a revocation. A change rolled back reaches nobody.
func TestRunnerChangesNameWhatChanged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := jobsSetup(t)
	r := b.runner(t, 1, 1024, 0)
	type heard struct{ channel, payload string }
	var mu sync.Mutex
	var hooked []heard
	b.store.OnRunnerChange(func(channel, payload string) {
		mu.Lock()
		hooked = append(hooked, heard{channel, payload})
		mu.Unlock()
	})
	l := listening(ctx, b.db)
	runners, revocations := l.Subscribe(store.ChannelRunnerStatus), l.Subscribe(store.ChannelRevocations)
	defer runners.Close()
	defer revocations.Close()

	// As fleet resumes a runner: lock, write, in a transaction of its own.
	resume := func(q *store.Querier) error {
		return q.WithTx(ctx, func(tx *store.Tx) error {
			if _, err := tx.LockRunner(ctx, record.AllOrganisations(), r); err != nil {
				return err
			}
			return tx.SetDraining(ctx, r, false)
		})
	}
	err := b.store.WithTx(ctx, func(tx *store.Tx) error {
		require.NoError(t, resume(&tx.Querier))
		return errors.New("rolled back")
	})
	require.Error(t, err)
	require.NoError(t, resume(&b.store.Querier))
	_, err = updatePool(ctx, b.store, record.AllOrganisations(), b.pool.ID, func(*record.Pool) {})
	require.NoError(t, err)
	_, err = b.store.RevokeCertificate(ctx, store.Revocation{Serial: "42", RevokedAt: time.Now()})
	require.NoError(t, err)

	want := []heard{
		{store.ChannelRunnerStatus, r.String()},
		{store.ChannelRunnerStatus, store.PoolChanged + b.pool.ID.String()},
		{store.ChannelRevocations, "42"},
	}
	mu.Lock()
	require.Equal(t, want, hooked, "this replica's hooks, at once")
	mu.Unlock()
	var got []heard
	for len(got) < len(want) {
		select {
		case p := <-runners.C:
			got = append(got, heard{store.ChannelRunnerStatus, p})
		case p := <-revocations.C:
			got = append(got, heard{store.ChannelRevocations, p})
		case <-time.After(10 * time.Second):
			t.Fatalf("notified %v", got)
		}
	}
	require.ElementsMatch(t, want, got, "other replicas, by NOTIFY")
}
