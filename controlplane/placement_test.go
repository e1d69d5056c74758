package controlplane_test

import (
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
	_, code := b.gql(t, b.platform, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`,
		map[string]any{"in": jobInput(b.poolA.ID, selecting("rack in ()"))})
	require.Equal(t, "BAD_INPUT", code)
	require.Equal(t, before, b.count(t, "SELECT count(*) FROM jobs"), "refusals queue nothing")

	id, code := b.submit(t, b.platform, jobInput(b.poolA.ID, selecting(" rack == r7 ,zone in (a, b),!spot")))
	require.Empty(t, code)
	data, code := b.gql(t, b.platform, `query($id: ID!) { job(id: $id) { selector } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, "rack=r7,zone in (a,b),!spot", data["job"].(map[string]any)["selector"])
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
// to the one with 8, whichever asks first.
func TestAJobGoesToTheWaitingRunnerThatStrandsLeast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	smallID, small, _ := b.approvedRunner(t, measured(2))
	bigID, big, _ := b.approvedRunner(t, measured(8))
	asking := func(id string) bool {
		return b.count(t, "SELECT count(*) FROM runner_waits WHERE runner_id = $1", id) == 1
	}
	got := make(chan string, 2)
	wait := func(c *http.Client, name string) {
		if len(b.lease(t, c, anyWork(5))) == 1 {
			got <- name
			return
		}
		got <- ""
	}
	go wait(small, "small")
	require.Eventually(t, func() bool { return asking(smallID) }, 5*time.Second, 20*time.Millisecond)
	go wait(big, "big")
	require.Eventually(t, func() bool { return asking(bigID) }, 5*time.Second, 20*time.Millisecond)

	_, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["claim"].(map[string]any)["gpus"] = 1 }))
	require.Empty(t, code)
	require.Equal(t, "small", <-got, "the runner left with no GPU free takes it")
	require.Empty(t, <-got, "the one with 8 GPUs gets nothing")
}
