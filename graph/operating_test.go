package graph_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/graph"
)

// nodes is a connection's nodes in an answer.
func nodes(r gqlResponse, field string) []any {
	n, _ := dig(r.Data, field, "nodes").([]any)
	return n
}

func TestAdminsAndTheirTokensAreListedInScope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const q = `{ admins { totalCount nodes { name role tokens { id createdAt lastUsedAt expiresAt revokedAt live } } } }`
	r := b.do(t, b.platform, q, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, 4.0, dig(r.Data, "admins", "totalCount"))
	var names []string
	for _, n := range nodes(r, "admins") {
		names = append(names, n.(map[string]any)["name"].(string))
	}
	require.Equal(t, []string{"root", "alice", "mallory", "bob"}, names, "oldest first")
	root := nodes(r, "admins")[0].(map[string]any)["tokens"].([]any)[0].(map[string]any)
	require.NotNil(t, root["lastUsedAt"], "the token that asked was used just now")
	require.Equal(t, true, root["live"])

	r = b.do(t, b.adminA, q, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, 2.0, dig(r.Data, "admins", "totalCount"), "an organisation admin sees its organisation's")
	require.Len(t, nodes(r, "admins"), 2)

	r = b.do(t, b.memberA, q, nil)
	require.Equal(t, graph.CodeForbidden, r.code(), r.Raw)
	r = b.do(t, b.memberA, `{ viewer { tokens { live } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, []any{map[string]any{"live": true}}, dig(r.Data, "viewer", "tokens"), "a member sees its own")
}

// tokenID is the id of the only token of the admin named name.
func (b *testBundle) tokenID(t *testing.T, name string) string {
	t.Helper()
	var id string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT t.id FROM admin_tokens t JOIN admins a ON a.id = t.admin_id WHERE a.name = $1", name).Scan(&id))
	return id
}

func TestRevokingAnAdminToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const revoke = `mutation($id: ID!) { revokeAdminToken(id: $id) { id revokedAt live } }`
	alice, mallory, bob, root := b.tokenID(t, "alice"), b.tokenID(t, "mallory"), b.tokenID(t, "bob"), b.tokenID(t, "root")

	before := b.counts(t)
	for _, c := range []struct {
		name, token, id, code string
	}{
		{"a member revokes its admin's token", b.memberA, alice, "NOT_FOUND"},
		{"an admin revokes another organisation's", b.adminA, bob, "NOT_FOUND"},
		{"an organisation admin revokes a platform admin's", b.adminA, root, "NOT_FOUND"},
		{"no such token", b.adminA, "00000000-0000-0000-0000-000000000000", "NOT_FOUND"},
		{"not an id", b.adminA, "x", graph.CodeBadInput},
	} {
		r := b.do(t, c.token, revoke, map[string]any{"id": c.id})
		require.Equal(t, c.code, r.code(), "%s: %s", c.name, r.Raw)
	}
	var revoked int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM admin_tokens WHERE revoked_at IS NOT NULL").Scan(&revoked))
	require.Zero(t, revoked, "nothing was revoked")
	require.Equal(t, before, b.counts(t))

	r := b.do(t, b.adminA, revoke, map[string]any{"id": mallory})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, false, dig(r.Data, "revokeAdminToken", "live"))
	r = b.do(t, b.memberA, `{ viewer { name } }`, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, "the next request is refused")
	r = b.do(t, b.adminA, revoke, map[string]any{"id": mallory})
	require.Equal(t, "CONFLICT", r.code(), r.Raw)

	// A member revokes its own token; a replacement works.
	r = b.do(t, b.adminA, `mutation($a: ID!) { issueAdminToken(adminId: $a, ttlSeconds: 3600) { token tokenId admin { name } expiresAt } }`,
		map[string]any{"a": dig(b.do(t, b.adminA, `{ admins { nodes { id name } } }`, nil).Data, "admins", "nodes").([]any)[1].(map[string]any)["id"]})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, "mallory", dig(r.Data, "issueAdminToken", "admin", "name"))
	fresh := dig(r.Data, "issueAdminToken", "token").(string)
	r = b.do(t, fresh, revoke, map[string]any{"id": dig(r.Data, "issueAdminToken", "tokenId")})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, http.StatusUnauthorized, b.do(t, fresh, `{ viewer { name } }`, nil).Status)

	var outcomes []string
	for _, e := range b.auditRows(t) {
		if e["action"] == "revokeAdminToken" || e["action"] == "issueAdminToken" {
			outcomes = append(outcomes, e["actor"]+" "+e["action"]+" "+e["outcome"])
		}
	}
	require.Contains(t, outcomes, "alice revokeAdminToken OK")
	require.Contains(t, outcomes, "mallory revokeAdminToken NOT_FOUND")
	require.Contains(t, outcomes, "alice issueAdminToken OK")
}

// A token revoked through one replica is refused at the next request to
// another, and the websockets it opened there close within a second,
// long before that replica would check them again on its own.
func TestARevokedTokenStopsOnEveryReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := &testBundle{pool: b.pool, handler: graph.NewHandler(controlplanetest.NewServices(t, b.pool, nil).GraphOptions())}
	conn := dialSocket(t, other)
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + b.adminB}}))
	var msg map[string]any
	require.NoError(t, conn.ReadJSON(&msg))
	require.Equal(t, "connection_ack", msg["type"])
	b.followAJob(t, conn, b.poolB.ID)

	r := b.do(t, b.platform, `mutation($id: ID!) { revokeAdminToken(id: $id) { id } }`, map[string]any{"id": b.tokenID(t, "bob")})
	require.Empty(t, r.Errors, r.Raw)
	start := time.Now()
	require.Equal(t, http.StatusUnauthorized, other.do(t, b.adminB, `{ viewer { name } }`, nil).Status)
	require.Equal(t, 4403, closeCode(t, conn))
	took := time.Since(start)
	t.Logf("the other replica closed the socket %v after the revocation", took.Round(time.Millisecond))
	require.Less(t, took, time.Second)
}

func TestEnrolmentTokensAreListedAndRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const create = `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { expiresAt } }`
	for range 2 {
		r := b.do(t, b.adminA, create, map[string]any{"p": b.poolA.ID})
		require.Empty(t, r.Errors, r.Raw)
	}
	const list = `query($s: EnrolmentTokenState) { enrolmentTokens(state: $s) { nodes { id state pool { name } createdBy { name } runner { id } revokedAt } } }`
	r := b.do(t, b.adminA, list, nil)
	require.Empty(t, r.Errors, r.Raw)
	toks := nodes(r, "enrolmentTokens")
	require.Len(t, toks, 2)
	first := toks[0].(map[string]any)
	require.Equal(t, "LIVE", first["state"])
	require.Equal(t, "alice", dig(first, "createdBy", "name"))
	require.Equal(t, "pool-a", dig(first, "pool", "name"))
	require.Empty(t, nodes(b.do(t, b.adminB, list, nil), "enrolmentTokens"), "another organisation's tokens are not listed")

	const revoke = `mutation($id: ID!) { revokeEnrolmentToken(id: $id) { state revokedAt } }`
	r = b.do(t, b.adminB, revoke, map[string]any{"id": first["id"]})
	require.Equal(t, "NOT_FOUND", r.code(), r.Raw)
	require.Equal(t, "LIVE", nodes(b.do(t, b.adminA, list, nil), "enrolmentTokens")[0].(map[string]any)["state"], "unchanged")
	r = b.do(t, b.adminA, revoke, map[string]any{"id": first["id"]})
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, "REVOKED", dig(r.Data, "revokeEnrolmentToken", "state"))
	r = b.do(t, b.adminA, revoke, map[string]any{"id": first["id"]})
	require.Equal(t, "CONFLICT", r.code(), r.Raw)
	require.Len(t, nodes(b.do(t, b.adminA, list, map[string]any{"s": "LIVE"}), "enrolmentTokens"), 1)
	require.Len(t, nodes(b.do(t, b.adminA, list, map[string]any{"s": "REVOKED"}), "enrolmentTokens"), 1)
}
