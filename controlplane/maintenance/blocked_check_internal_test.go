package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// The blocked check reads the whole queue first, then only what was
// submitted since the last check (with a minute's slack), and the whole
// queue again every wholeEvery checks; a check cut short by its batch size
// does not move on.
func TestPlaceabilityChecksPace(t *testing.T) {
	t.Parallel()
	var p placeabilityChecks
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if !p.since().IsZero() {
		t.Fatal("the first check reads the whole queue")
	}
	p.done(at, true)
	for i := 1; i < wholeEvery; i++ {
		prev := at
		at = at.Add(10 * time.Second)
		if got, want := p.since(), prev.Add(-slack); !got.Equal(want) {
			t.Fatalf("check %d reads since %v, want %v", i, got, want)
		}
		p.done(at, true)
	}
	at = at.Add(10 * time.Second)
	if !p.since().IsZero() {
		t.Fatalf("check %d reads since %v: the whole queue is due", wholeEvery, p.since())
	}
	p.done(at, false)
	if !p.since().IsZero() {
		t.Fatal("a whole check cut short is done again")
	}
	p.done(at, true)
	next := at.Add(10 * time.Second)
	if got := p.since(); !got.Equal(at.Add(-slack)) {
		t.Fatalf("after a whole check: since %v", got)
	}
	p.done(next, false)
	if got := p.since(); !got.Equal(at.Add(-slack)) {
		t.Fatalf("an incremental check cut short moved on to %v", got)
	}
}

// The blocked check marks BLOCKED, with the reason, what no runner of the
// pool could ever hold: first reading the whole queue, then only what was
// submitted since. Once a runner that could hold it comes, the job is
// queued again and the runners waiting on the pool wake.
func TestTheBlockedCheckBlocksAndUnblocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner(t, 8, 65536, 2)
	huge := b.submit(t, record.Claim{Cores: 1, GPUs: 4, WallClockSeconds: 60})
	fits := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})

	check := NewBlockedCheck(b.store, BlockedCheckConfig{Interval: 20 * time.Millisecond})
	check.testSignals.init()
	started(t, check)
	require.Equal(t, blockedCheckPass{Whole: true, Blocked: store.Blocked{Blocked: 1}}, check.testSignals.checked.wait(t))
	got := b.job(t, huge.ID)
	require.Equal(t, record.JobBlocked, got.State)
	require.Equal(t, "no approved runner of the pool could ever hold 1 cores, 0 MiB and 4 GPUs", got.StateReason)
	require.Equal(t, []string{"SUBMITTED", "BLOCKED"}, b.eventTypes(t, huge.ID))
	require.Equal(t, record.JobQueued, b.job(t, fits.ID).State)
	require.Equal(t, blockedCheckPass{}, check.testSignals.checked.wait(t), "then only what is new")

	late := b.submit(t, record.Claim{Cores: 16, WallClockSeconds: 60})
	pass := check.testSignals.checked.wait(t)
	for pass.Blocked.Blocked == 0 {
		pass = check.testSignals.checked.wait(t)
	}
	require.Equal(t, blockedCheckPass{Blocked: store.Blocked{Blocked: 1}}, pass, "a new job, read incrementally")
	require.Equal(t, record.JobBlocked, b.job(t, late.ID).State)

	wakes := b.wakes(t)
	b.runner(t, 8, 65536, 8)
	for pass.Unblocked == 0 {
		pass = check.testSignals.checked.wait(t)
	}
	require.Equal(t, blockedCheckPass{Unblocked: 1}, pass)
	got = b.job(t, huge.ID)
	require.Equal(t, record.JobQueued, got.State)
	require.Empty(t, got.StateReason)
	require.Equal(t, []string{"SUBMITTED", "BLOCKED", "UNBLOCKED"}, b.eventTypes(t, huge.ID))
	require.Equal(t, record.JobBlocked, b.job(t, late.ID).State, "16 cores: still no runner")
	require.Equal(t, 2, b.counted("BLOCKED"))
	require.Equal(t, 1, b.counted("UNBLOCKED"))
	b.wokePool(t, wakes)
}

// A check cut short by its batch size reads the same jobs again, and only
// a complete one moves on.
func TestABlockedCheckCutShortDoesNotMoveOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner(t, 8, 65536, 0)
	for range 3 {
		b.submit(t, record.Claim{Cores: 16, WallClockSeconds: 60})
	}
	check := NewBlockedCheck(b.store, BlockedCheckConfig{Interval: 20 * time.Millisecond, Batch: 2})
	check.testSignals.init()
	started(t, check)
	for _, want := range []blockedCheckPass{
		{Whole: true, Blocked: store.Blocked{Blocked: 2, Cut: true}},
		{Whole: true, Blocked: store.Blocked{Blocked: 1}},
		{},
	} {
		require.Equal(t, want, check.testSignals.checked.wait(t))
	}
}

// Each check also drops the waits for work that ended over a minute ago
// (runners that stopped asking without a word).
func TestTheBlockedCheckDropsWaitsLongEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.runner(t, 8, 65536, 0)
	big := record.Claim{Cores: 8, MemoryMiB: 65536}
	_, ok, err := b.store.ClaimJob(ctx, record.ClaimRequest{RunnerID: r, Kinds: []string{"default"}, Free: big, Largest: big,
		DefaultLeaseSeconds: 30, WaitSeconds: 30})
	require.NoError(t, err)
	require.False(t, ok)
	_, err = b.db.Exec(ctx, `UPDATE runner_waits SET until = now() - interval '2 minutes' WHERE runner_id = $1`, r)
	require.NoError(t, err)

	check := NewBlockedCheck(b.store, BlockedCheckConfig{Interval: 20 * time.Millisecond})
	check.testSignals.init()
	started(t, check)
	check.testSignals.checked.wait(t)
	var n int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM runner_waits`).Scan(&n))
	require.Zero(t, n)
}
