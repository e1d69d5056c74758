package controlplane_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// A selector is checked at submission (a refusal queues nothing), shown
// as written canonically, and placed by the runners' reported labels.
func TestSelectorsAreCheckedShownAndPlaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, r12, _ := b.approvedRunner(t, measured(0)) // rack=r12
	c := measured(0)
	c.Labels = append(c.Labels, runnerapi.Label{Key: "zone", Value: "b", Source: runnerapi.LabelDeclared})
	c.Labels[1].Value = "r7"
	r7ID, r7, _ := b.approvedRunner(t, c)
	selecting := func(s string) func(map[string]any) { return func(in map[string]any) { in["selector"] = s } }

	before := b.count(t, "SELECT count(*) FROM jobs")
	for _, bad := range []string{"rack in ()", "Rack$=1", "rack=a,,zone=b", "(", "rack=a b", strings.Repeat("a,", 32) + "a"} {
		data, code := b.gql(t, b.platform, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`,
			map[string]any{"in": jobInput(b.poolA.ID, selecting(bad))})
		require.Equal(t, "BAD_INPUT", code, "%q: %v", bad, data)
	}
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"), "refusals queue nothing")

	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, selecting(" rack == r7 ,zone in (a, b),!spot")))
	require.Empty(t, code)
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { selector } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, "rack=r7,!spot,zone in (a,b)", data["job"].(map[string]any)["selector"])
	plain, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	data, code = b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { selector } }`, map[string]any{"id": plain})
	require.Empty(t, code)
	require.Nil(t, data["job"].(map[string]any)["selector"], "no selector: any runner")

	leases := b.lease(t, r12, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, plain, leases[0].LeaseID, "r12 gets the job without a selector only")
	require.Empty(t, b.lease(t, r12, anyWork(0)))
	leases = b.lease(t, r7, anyWork(0))
	require.Len(t, leases, 1)
	require.Equal(t, id, leases[0].LeaseID)

	data, code = b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { kinds } }`, map[string]any{"id": r7ID})
	require.Empty(t, code)
	require.Equal(t, []any{"default"}, data["runner"].(map[string]any)["kinds"], "the kinds it asked for")
}

// Two runners wait for work; a 1-GPU job goes to the one with 2 GPUs, not
// to the one with 8, whichever began to wait first.
func TestAJobGoesToTheWaitingRunnerThatStrandsLeast(t *testing.T) {
	t.Parallel()
	for _, smallFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "the small one asks first", false: "the big one asks first"}[smallFirst], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			smallID, small, _ := b.approvedRunner(t, measured(2))
			bigID, big, _ := b.approvedRunner(t, measured(8))
			got := make(chan string, 2)
			wait := func(c *http.Client, name string) {
				if len(b.lease(t, c, anyWork(5))) == 1 {
					got <- name
					return
				}
				got <- ""
			}
			order := []struct {
				id, name string
				c        *http.Client
			}{{smallID, "small", small}, {bigID, "big", big}}
			if !smallFirst {
				order[0], order[1] = order[1], order[0]
			}
			for _, r := range order {
				go wait(r.c, r.name)
				require.Eventually(t, func() bool { return b.waiting(t, r.id) }, 5*time.Second, 20*time.Millisecond)
			}

			_, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["claim"].(map[string]any)["gpus"] = 1 }))
			require.Empty(t, code)
			require.Equal(t, "small", <-got, "the runner left with no GPU free takes it")
			require.Empty(t, <-got, "the one with 8 GPUs gets nothing")
		})
	}
}

// A runner whose request for work goes away waits no longer: the jobs
// left to it go to others at once, not when its wait would have ended.
func TestARunnerThatStopsAskingNoLongerKeepsJobsFromOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	smallID, small, _ := b.approvedRunner(t, measured(2))
	_, big, _ := b.approvedRunner(t, measured(8))
	cancel, done := askForWork(t, small, b.runnerURL, anyWork(30))
	require.Eventually(t, func() bool { return b.waiting(t, smallID) }, 5*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { return !b.waiting(t, smallID) }, 5*time.Second, 20*time.Millisecond,
		"the request gone, the runner waits no longer")

	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["claim"].(map[string]any)["gpus"] = 1 }))
	require.Empty(t, code)
	leases := b.lease(t, big, anyWork(0))
	require.Len(t, leases, 1, "not left to a runner that stopped asking")
	require.Equal(t, id, leases[0].LeaseID)
}

// waiting reports whether the runner waits for work now, as the claims
// of others see it.
func (b *testBundle) waiting(t *testing.T, runner string) bool {
	return b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1 AND until > now()", runner) == 1
}

// A replica that stops ends its long polls, but its runners go on waiting:
// they ask another replica at once, which records them again, and a delete
// from the stopping one landing after that would undo it.
func TestAStoppingReplicaLeavesItsRunnersWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	second := b.secondReplica(t)
	id, c, _ := b.approvedRunner(t, measured(2))
	_, done := askForWork(t, c, "https://"+second.RunnerAddr().String(), anyWork(30))
	require.Eventually(t, func() bool { return b.waiting(t, id) }, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, second.Stop(context.Background()))
	<-done
	require.True(t, b.waiting(t, id), "still waiting, as far as the other replicas' claims go")
}
