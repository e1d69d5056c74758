package graph_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
)

// Organisations submit to the platform's own pools: such a job is its
// submitter's organisation's, seen by it alone (and the platform), and the
// pool stays the platform's to manage.
func TestOrganisationsSubmitToThePlatformsPools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	shared, err := b.services.Tenancy.CreatePool(ctx, record.NewPool{Name: "shared"})
	require.NoError(t, err)

	r := b.do(t, b.memberA, `{ pools { name organisation { name } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `[{"name":"shared","organisation":null},{"name":"pool-a","organisation":{"name":"org-a"}}]`, mustJSON(r.Data["pools"]),
		"an organisation sees the platform's pools, to submit to them")

	const submit = `mutation($p: ID!, $k: String) { submitJob(input: {poolId: $p, image: "busybox", claim: {cores: 1, wallClockSeconds: 60}, idempotencyKey: $k}) {
		id organisation { name } pool { name } } }`
	own := b.do(t, b.memberA, submit, map[string]any{"p": b.poolA.ID})
	require.Empty(t, own.Errors, own.Raw)
	r = b.do(t, b.memberA, submit, map[string]any{"p": shared.ID, "k": "nightly"})
	require.Empty(t, r.Errors, r.Raw)
	mine := dig(r.Data, "submitJob", "id").(string)
	require.Equal(t, "org-a", dig(r.Data, "submitJob", "organisation", "name"))
	require.Equal(t, "shared", dig(r.Data, "submitJob", "pool", "name"))
	again := b.do(t, b.adminA, submit, map[string]any{"p": shared.ID, "k": "nightly"})
	require.Equal(t, mine, dig(again.Data, "submitJob", "id"), "the same key, the same organisation: the same job")
	theirs := b.do(t, b.adminB, submit, map[string]any{"p": shared.ID, "k": "nightly"})
	require.Empty(t, theirs.Errors, theirs.Raw)
	require.NotEqual(t, mine, dig(theirs.Data, "submitJob", "id"), "a key is its organisation's: another's is another job")
	require.Equal(t, "org-b", dig(theirs.Data, "submitJob", "organisation", "name"))
	root := b.do(t, b.platform, submit, map[string]any{"p": shared.ID})
	require.Nil(t, dig(root.Data, "submitJob", "organisation"), "a platform admin's job is the platform's")

	// Each organisation's list: its own pools' jobs and its platform jobs,
	// newest first, paged across both.
	ids, _ := b.pages(t, b.memberA, `query($after: String) { jobs(first: 1, after: $after) { nodes { id } pageInfo { hasNextPage endCursor } } }`, nil, "jobs")
	require.Equal(t, []string{mine, dig(own.Data, "submitJob", "id").(string)}, ids)
	require.Len(t, nodes(b.do(t, b.adminB, `{ jobs { nodes { id } } }`, nil), "jobs"), 1)
	require.Len(t, nodes(b.do(t, b.platform, `query($p: ID) { jobs(poolId: $p) { nodes { id } } }`, map[string]any{"p": shared.ID}), "jobs"), 3)
	require.Len(t, nodes(b.do(t, b.memberA, `query($p: ID) { jobs(poolId: $p) { nodes { id } } }`, map[string]any{"p": shared.ID}), "jobs"), 1)

	before := b.counts(t)
	for name, c := range map[string]struct {
		token, query string
		vars         map[string]any
		code         string
	}{
		"another organisation's job":         {b.adminB, `query($id: ID!) { job(id: $id) { id } }`, map[string]any{"id": mine}, ""},
		"cancel another organisation's job":  {b.adminB, `mutation($id: ID!) { cancelJob(id: $id) { id } }`, map[string]any{"id": mine}, "NOT_FOUND"},
		"enrol runners into a platform pool": {b.adminA, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { token } }`, map[string]any{"p": shared.ID}, "NOT_FOUND"},
		"change a platform pool":             {b.adminA, `mutation($p: ID!) { updatePool(input: {id: $p, name: "mine"}) { id } }`, map[string]any{"p": shared.ID}, "NOT_FOUND"},
	} {
		r := b.do(t, c.token, c.query, c.vars)
		require.Equal(t, c.code, r.code(), "%s: %s", name, r.Raw)
		if c.code == "" {
			require.Nil(t, r.Data["job"], name)
		}
	}
	require.Equal(t, before, b.counts(t))
	r = b.do(t, b.adminB, `mutation($id: ID!) { cancelJob(id: $id) { state } }`, map[string]any{"id": dig(theirs.Data, "submitJob", "id")})
	require.Empty(t, r.Errors, r.Raw)

	// The platform pool's runners stay the platform's: their holds too.
	runner := b.services.ApprovedRunner(t, shared.ID, controlplanetest.Runner{Name: "p-01", PublicKey: make([]byte, 32), CSR: []byte{0}, Cores: 8})
	r = b.do(t, b.platform, `mutation($r: ID!) { createHold(runnerId: $r, gpus: 1, reason: "burn-in", durationSeconds: 600) { id } }`, map[string]any{"r": runner})
	require.Empty(t, r.Errors, r.Raw)
	const holds = `query($p: ID!) { pool(id: $p) { name holds { reason } } }`
	require.Len(t, dig(b.do(t, b.platform, holds, map[string]any{"p": shared.ID}).Data, "pool", "holds"), 1)
	r = b.do(t, b.adminA, holds, map[string]any{"p": shared.ID})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, "shared", dig(r.Data, "pool", "name"))
	require.Empty(t, dig(r.Data, "pool", "holds"))
	require.Empty(t, nodes(b.do(t, b.adminA, `{ runners { nodes { id } } }`, nil), "runners"))
}
