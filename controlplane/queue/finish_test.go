package queue

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
)

// A result is decided on the job as read without locks; a cancel that
// lands between that read and the update is not lost: the update is
// guarded by what the decision rested on, and the job is decided again
// under a row lock.
func TestACancelDuringAResultIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	org, err := s.CreateOrganisation(ctx, "org")
	require.NoError(t, err)
	pool, err := s.CreatePool(ctx, store.NewPool{OrganisationID: &org.ID, Name: "p"})
	require.NoError(t, err)
	r := storetest.ApprovedRunner(t, s, pool.ID, 8, 65536, 0)
	j, _, err := s.SubmitJob(ctx, store.AllOrganisations(), store.NewJob{PoolID: pool.ID, Image: "busybox",
		Claim: store.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"})
	require.NoError(t, err)
	big := store.Claim{Cores: 8, MemoryMiB: 65536}
	held, ok, err := s.ClaimJob(ctx, store.ClaimRequest{RunnerID: r, Kinds: []string{"default"}, Free: big, Largest: big, DefaultLeaseSeconds: 30})
	require.NoError(t, err)
	require.True(t, ok)

	reads := 0
	f := &Finisher{Store: s, afterRead: func(context.Context) {
		reads++
		// Another replica's transaction: not the one the result runs in.
		_, err := s.CancelJob(context.Background(), store.AllOrganisations(), j.ID)
		require.NoError(t, err)
	}}
	zero := 0
	done, err := f.Finish(ctx, store.Outcome{JobID: j.ID, Attempt: held.Attempt, RunnerID: r, ExitCode: &zero})
	require.NoError(t, err)
	require.Equal(t, 1, reads)
	require.Equal(t, store.JobCancelled, done.State, "the cancel that came between the read and the update")
	got, err := s.Job(ctx, store.AllOrganisations(), j.ID)
	require.NoError(t, err)
	require.Equal(t, store.JobCancelled, got.State)
}

// Failures in a row follow the applied outcomes in order: a counted host
// fault each, one reset for each run of other outcomes; outcomes not
// applied (stale) count for nothing.
func TestFailuresFollowTheOutcomesInOrder(t *testing.T) {
	t.Parallel()
	fault, other := &store.Transition{CountsAsHostFault: true}, &store.Transition{}
	for _, c := range []struct {
		name string
		ts   []*store.Transition
		want []bool
	}{
		{"none", nil, nil},
		{"one success resets", []*store.Transition{other}, []bool{false}},
		{"a run of successes is one reset", []*store.Transition{other, other, other}, []bool{false}},
		{"faults count each", []*store.Transition{fault, fault}, []bool{true, true}},
		{"a reset between faults", []*store.Transition{fault, other, other, fault}, []bool{true, false, true}},
		{"stale outcomes count for nothing", []*store.Transition{nil, fault, nil, other}, []bool{true, false}},
	} {
		b := &batch{transitions: c.ts}
		require.Equal(t, c.want, b.failures(), c.name)
	}
}
