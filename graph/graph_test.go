package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/graph"
)

// testBundle is a real handler over a real database of the test's own,
// with two organisations and admins of every role.
type testBundle struct {
	pool     *pgxpool.Pool
	services *controlplanetest.Services
	handler  http.Handler
	orgA     record.Organisation
	orgB     record.Organisation
	poolA    record.Pool
	poolB    record.Pool
	// tokens by role and organisation
	platform, adminA, memberA, adminB string
}

func setup(t testing.TB, opts ...func(*graph.Options)) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{pool: controlplanetest.NewPool(t)}
	b.services = controlplanetest.NewServices(t, b.pool, nil)
	tn := b.services.Tenancy
	var err error
	b.orgA, err = tn.CreateOrganisation(ctx, "org-a")
	require.NoError(t, err)
	b.orgB, err = tn.CreateOrganisation(ctx, "org-b")
	require.NoError(t, err)
	b.poolA, err = tn.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgA.ID, Name: "pool-a"})
	require.NoError(t, err)
	b.poolB, err = tn.CreatePool(ctx, record.NewPool{OrganisationID: &b.orgB.ID, Name: "pool-b"})
	require.NoError(t, err)
	b.platform = newAdmin(t, tn, "root", record.RolePlatformAdmin, nil)
	b.adminA = newAdmin(t, tn, "alice", record.RoleOrgAdmin, &b.orgA.ID)
	b.memberA = newAdmin(t, tn, "mallory", record.RoleOrgMember, &b.orgA.ID)
	b.adminB = newAdmin(t, tn, "bob", record.RoleOrgAdmin, &b.orgB.ID)
	o := b.services.GraphOptions()
	o.Log = testLogger(t)
	for _, f := range opts {
		f(&o)
	}
	b.handler = graph.NewHandler(o)
	return b
}

func newAdmin(t testing.TB, s *tenancy.Service, name string, role record.Role, org *uuid.UUID) string {
	t.Helper()
	made, err := s.CreateAdmin(context.Background(), tenancy.NewAdmin{Name: name, Role: role, OrganisationID: org})
	require.NoError(t, err)
	return made.Token
}

type gqlResponse struct {
	Status int
	Data   map[string]any
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	}
	Raw string
}

// code is the first error's extensions.code ("" without errors).
func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

func (b *testBundle) do(t testing.TB, token, query string, vars map[string]any) gqlResponse {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	return b.doRaw(t, token, body)
}

func (b *testBundle) doRaw(t testing.TB, token string, body []byte) gqlResponse {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	r := gqlResponse{Status: rec.Code, Raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &r)
	return r
}

// counts is how many rows each table holds: bad input must change none.
func (b *testBundle) counts(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"organisations", "admins", "admin_tokens", "pools"} {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

func (b *testBundle) auditRows(t testing.TB) []map[string]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT actor_name, action, outcome, coalesce(organisation_id::text, '') FROM audit_log ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		var actor, action, outcome, org string
		require.NoError(t, rows.Scan(&actor, &action, &outcome, &org))
		out = append(out, map[string]string{"actor": actor, "action": action, "outcome": outcome, "org": org})
	}
	require.NoError(t, rows.Err())
	return out
}

func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func testLogger(t testing.TB) *slogLogger { return newTestLogger(t) }

func TestUnauthenticatedRequestsGet401WithNoDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.services.ExpiredAdminToken(t, "old")
	forged, _ := tokens.Admin.New() // well-formed, never stored
	before := b.counts(t)

	var bodies []string
	for name, token := range map[string]string{
		"missing":   "",
		"malformed": "not-a-token",
		"unknown":   forged,
		"expired":   expired,
		"truncated": b.platform[:len(b.platform)-1],
	} {
		r := b.do(t, token, `mutation { createOrganisation(input: {name: "sneaky"}) { id } }`, nil)
		require.Equal(t, http.StatusUnauthorized, r.Status, name)
		bodies = append(bodies, r.Raw)
	}
	for _, body := range bodies {
		require.Equal(t, bodies[0], body, "every refusal must look the same")
	}
	require.Equal(t, before, b.counts(t))
	require.Empty(t, b.auditRows(t), "nobody to audit: the request never reached the API")
}

func TestViewerForEveryRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for token, want := range map[string][2]any{
		b.platform: {"PLATFORM_ADMIN", nil},
		b.adminA:   {"ORG_ADMIN", "org-a"},
		b.memberA:  {"ORG_MEMBER", "org-a"},
		b.adminB:   {"ORG_ADMIN", "org-b"},
	} {
		r := b.do(t, token, `{ viewer { role organisation { name } } }`, nil)
		require.Empty(t, r.Errors, r.Raw)
		require.Equal(t, want[0], dig(r.Data, "viewer", "role"))
		require.Equal(t, want[1], dig(r.Data, "viewer", "organisation", "name"))
	}
}

func TestAnotherOrganisationsPoolLooksLikeNoPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const q = `query($id: ID!) { pool(id: $id) { id name } }`
	for _, token := range []string{b.adminA, b.memberA} {
		theirs := b.do(t, token, q, map[string]any{"id": b.poolB.ID})
		missing := b.do(t, token, q, map[string]any{"id": uuid.New()})
		require.Equal(t, missing.Raw, theirs.Raw)
		require.Equal(t, http.StatusOK, theirs.Status)
		require.Nil(t, dig(theirs.Data, "pool"))

		own := b.do(t, token, q, map[string]any{"id": b.poolA.ID})
		require.Equal(t, "pool-a", dig(own.Data, "pool", "name"))
	}
	// The platform admin sees both.
	r := b.do(t, b.platform, q, map[string]any{"id": b.poolB.ID})
	require.Equal(t, "pool-b", dig(r.Data, "pool", "name"))
}

func TestListsAreScopedToTheCallersOrganisation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const q = `{ organisations { name pools { name organisation { name } } } pools { name } }`

	r := b.do(t, b.memberA, q, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"organisations":[{"name":"org-a","pools":[{"name":"pool-a","organisation":{"name":"org-a"}}]}],"pools":[{"name":"pool-a"}]}`, mustJSON(r.Data))

	// Naming another organisation in a filter finds nothing, it does not widen the scope.
	r = b.do(t, b.adminA, `query($org: ID, $id: ID!) { pools(organisationId: $org) { name } organisation(id: $id) { name } }`, map[string]any{"org": b.orgB.ID, "id": b.orgB.ID})
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"pools":[],"organisation":null}`, mustJSON(r.Data))

	r = b.do(t, b.platform, `{ organisations { name } pools { name } }`, nil)
	require.JSONEq(t, `{"organisations":[{"name":"org-a"},{"name":"org-b"}],"pools":[{"name":"pool-a"},{"name":"pool-b"}]}`, mustJSON(r.Data))
}

func TestRolesGateMutationsAndRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	cases := []struct {
		name, token, query string
		vars               map[string]any
		code               string
	}{
		{"member creates pool", b.memberA, `mutation { createPool(input: {name: "x"}) { id } }`, nil, graph.CodeForbidden},
		{"org admin creates organisation", b.adminA, `mutation { createOrganisation(input: {name: "x"}) { id } }`, nil, graph.CodeForbidden},
		{"org admin creates pool in another org", b.adminA, `mutation($o: ID) { createPool(input: {organisationId: $o, name: "x"}) { id } }`, map[string]any{"o": b.orgB.ID}, graph.CodeNotFound},
		{"org admin creates pool in a missing org", b.adminA, `mutation($o: ID) { createPool(input: {organisationId: $o, name: "x"}) { id } }`, map[string]any{"o": uuid.New()}, graph.CodeNotFound},
		{"org admin updates another org's pool", b.adminA, `mutation($id: ID!) { updatePool(input: {id: $id, name: "mine"}) { id } }`, map[string]any{"id": b.poolB.ID}, graph.CodeNotFound},
		{"org admin mints a platform admin", b.adminA, `mutation { createAdminToken(input: {name: "x", role: PLATFORM_ADMIN}) { token } }`, nil, graph.CodeForbidden},
		{"org admin mints a member elsewhere", b.adminA, `mutation($o: ID) { createAdminToken(input: {name: "x", role: ORG_MEMBER, organisationId: $o}) { token } }`, map[string]any{"o": b.orgB.ID}, graph.CodeNotFound},
		{"member mints a member", b.memberA, `mutation { createAdminToken(input: {name: "x", role: ORG_MEMBER}) { token } }`, nil, graph.CodeForbidden},
		{"member reads the audit log", b.memberA, `{ auditLog { nodes { id } } }`, nil, graph.CodeForbidden},
		{"org admin reads the audit log", b.adminA, `{ auditLog { nodes { id } } }`, nil, graph.CodeForbidden},
		{"platform admin of an org", b.platform, `mutation($o: ID) { createAdminToken(input: {name: "x", role: PLATFORM_ADMIN, organisationId: $o}) { token } }`, map[string]any{"o": b.orgA.ID}, graph.CodeBadInput},
		{"org role without org", b.platform, `mutation { createAdminToken(input: {name: "x", role: ORG_ADMIN}) { token } }`, nil, graph.CodeBadInput},
		{"duplicate organisation", b.platform, `mutation { createOrganisation(input: {name: "org-a"}) { id } }`, nil, graph.CodeConflict},
		{"bad organisation name", b.platform, `mutation { createOrganisation(input: {name: "Org A"}) { id } }`, nil, graph.CodeBadInput},
		{"lease too short", b.adminA, `mutation { createPool(input: {name: "x", leaseSeconds: 1}) { id } }`, nil, graph.CodeBadInput},
		{"timeout too long", b.adminA, `mutation($id: ID!) { updatePool(input: {id: $id, queueTimeoutHours: 100000}) { id } }`, map[string]any{"id": b.poolA.ID}, graph.CodeBadInput},
		{"malformed id", b.adminA, `mutation { updatePool(input: {id: "nope", name: "x"}) { id } }`, nil, graph.CodeBadInput},
	}
	for _, c := range cases {
		r := b.do(t, c.token, c.query, c.vars)
		require.Equal(t, c.code, r.code(), "%s: %s", c.name, r.Raw)
		require.Nil(t, dig(r.Data, "createPool"), c.name)
	}
	require.Equal(t, before, b.counts(t))
	got, err := b.services.Tenancy.Pool(context.Background(), record.AllOrganisations(), b.poolB.ID)
	require.NoError(t, err)
	require.Equal(t, "pool-b", got.Name)
}

func TestOrgAdminManagesItsOwnOrganisation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, b.adminA, `mutation { createPool(input: {name: "gpu-large", leaseSeconds: 45}) { name organisation { name } leaseSeconds { inForce isDefault } allowUnenforcedMemory } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"name":"gpu-large","organisation":{"name":"org-a"},"leaseSeconds":{"inForce":45,"isDefault":false},"allowUnenforcedMemory":false}`, mustJSON(r.Data["createPool"]))
	r = b.do(t, b.adminA, `mutation { createPool(input: {name: "cpu-shared", allowUnenforcedMemory: true}) { allowUnenforcedMemory } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"allowUnenforcedMemory":true}`, mustJSON(r.Data["createPool"]))

	r = b.do(t, b.adminA, `mutation { createAdminToken(input: {name: "ci-bot", role: ORG_MEMBER, ttlSeconds: 3600}) { token expiresAt admin { role organisation { name } } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	token := dig(r.Data, "createAdminToken", "token").(string)
	require.True(t, strings.HasPrefix(token, tokens.Admin.Prefix))
	require.NotNil(t, dig(r.Data, "createAdminToken", "expiresAt"))

	// The new token works, with the role it was given.
	r = b.do(t, token, `{ viewer { name role organisation { name } } }`, nil)
	require.JSONEq(t, `{"name":"ci-bot","role":"ORG_MEMBER","organisation":{"name":"org-a"}}`, mustJSON(r.Data["viewer"]))

	// Only its digest is stored.
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM admin_tokens WHERE position($1::bytea IN token_hash) > 0", []byte(token)).Scan(&n))
	require.Zero(t, n)
}

func TestPoolSettingsInForce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const fields = `name leaseSeconds { inForce own default isDefault } queueTimeoutHours { inForce own default isDefault }`
	r := b.do(t, b.platform, `query($id: ID!) { pool(id: $id) { `+fields+` } }`, map[string]any{"id": b.poolA.ID})
	require.JSONEq(t, `{"name":"pool-a","leaseSeconds":{"inForce":30,"own":null,"default":30,"isDefault":true},"queueTimeoutHours":{"inForce":24,"own":null,"default":24,"isDefault":true}}`, mustJSON(r.Data["pool"]))

	upd := `mutation($in: UpdatePoolInput!) { updatePool(input: $in) { ` + fields + ` } }`
	r = b.do(t, b.adminA, upd, map[string]any{"in": map[string]any{"id": b.poolA.ID, "leaseSeconds": 90, "queueTimeoutHours": 2}})
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"name":"pool-a","leaseSeconds":{"inForce":90,"own":90,"default":30,"isDefault":false},"queueTimeoutHours":{"inForce":2,"own":2,"default":24,"isDefault":false}}`, mustJSON(r.Data["updatePool"]))

	// An explicit null returns to the default; a field left out stays.
	r = b.do(t, b.adminA, upd, map[string]any{"in": map[string]any{"id": b.poolA.ID, "leaseSeconds": nil}})
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"name":"pool-a","leaseSeconds":{"inForce":30,"own":null,"default":30,"isDefault":true},"queueTimeoutHours":{"inForce":2,"own":2,"default":24,"isDefault":false}}`, mustJSON(r.Data["updatePool"]))
}

func TestEveryMutationIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, b.platform, `mutation { createOrganisation(input: {name: "org-c"}) { id } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	b.do(t, b.memberA, `mutation { createPool(input: {name: "x"}) { id } }`, nil)
	b.do(t, b.adminA, `mutation($o: ID) { createPool(input: {organisationId: $o, name: "x"}) { id } }`, map[string]any{"o": b.orgB.ID})
	b.do(t, b.adminA, `mutation { createPool(input: {name: "y"}) { id } }`, nil)

	require.Equal(t, []map[string]string{
		{"actor": "root", "action": "createOrganisation", "outcome": "OK", "org": ""},
		{"actor": "mallory", "action": "createPool", "outcome": "FORBIDDEN", "org": b.orgA.ID.String()},
		{"actor": "alice", "action": "createPool", "outcome": "NOT_FOUND", "org": b.orgA.ID.String()},
		{"actor": "alice", "action": "createPool", "outcome": "OK", "org": b.orgA.ID.String()},
	}, b.auditRows(t))

	r = b.do(t, b.platform, `{ auditLog(first: 2) { nodes { id actorName action outcome detail } pageInfo { hasNextPage endCursor } } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	page := r.Data["auditLog"].(map[string]any)
	entries := page["nodes"].([]any)
	require.Equal(t, true, page["pageInfo"].(map[string]any)["hasNextPage"])
	require.Len(t, entries, 2)
	newest := entries[0].(map[string]any)
	require.Equal(t, "OK", newest["outcome"])
	require.JSONEq(t, `{"input":{"name":"y"}}`, newest["detail"].(string))

	// Keyset paging continues where the first page ended.
	r = b.do(t, b.platform, `query($a: String) { auditLog(first: 10, after: $a) { nodes { action outcome } pageInfo { hasNextPage } } }`,
		map[string]any{"a": page["pageInfo"].(map[string]any)["endCursor"]})
	require.Empty(t, r.Errors, r.Raw)
	require.JSONEq(t, `{"nodes":[{"action":"createPool","outcome":"FORBIDDEN"},{"action":"createOrganisation","outcome":"OK"}],"pageInfo":{"hasNextPage":false}}`, mustJSON(r.Data["auditLog"]))

	// A token is never recorded: createAdminToken's detail holds its input only.
	r = b.do(t, b.platform, `mutation { createAdminToken(input: {name: "ops", role: PLATFORM_ADMIN}) { token } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	token := dig(r.Data, "createAdminToken", "token").(string)
	var leaked int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM audit_log WHERE detail::text LIKE '%' || $1 || '%'", token).Scan(&leaked))
	require.Zero(t, leaked)
}

func TestMalformedAndOversizeRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *graph.Options) {
		o.ComplexityLimit = 20
		o.MaxBodyBytes = 4096
	})
	before := b.counts(t)

	r := b.do(t, b.platform, `{ viewer { role `, nil)
	require.Equal(t, "GRAPHQL_PARSE_FAILED", r.code(), r.Raw)
	require.Contains(t, r.Errors[0].Message, "Expected")

	r = b.do(t, b.platform, `{ viewer { shoeSize } }`, nil)
	require.Equal(t, "GRAPHQL_VALIDATION_FAILED", r.code(), r.Raw)
	require.Contains(t, r.Errors[0].Message, "shoeSize")

	r = b.doRaw(t, b.platform, []byte(`{"query": 42`))
	require.NotEmpty(t, r.Errors, r.Raw)
	require.Equal(t, http.StatusBadRequest, r.Status)

	// Over the complexity limit: refused before anything runs.
	var q strings.Builder
	q.WriteString("{ ")
	for i := range 25 {
		q.WriteString("o" + string(rune('a'+i)) + ": organisations { id } ")
	}
	q.WriteString("}")
	r = b.do(t, b.platform, q.String(), nil)
	require.NotEmpty(t, r.Errors, r.Raw)
	require.Contains(t, r.Errors[0].Message, "complexity")
	require.Equal(t, "COMPLEXITY_LIMIT_EXCEEDED", r.code())

	// Over the body limit.
	big := `mutation { createOrganisation(input: {name: "` + strings.Repeat("a", 5000) + `"}) { id } }`
	r = b.do(t, b.platform, big, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Raw)

	require.Equal(t, before, b.counts(t))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
