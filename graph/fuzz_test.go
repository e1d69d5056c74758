package graph_test

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/runmesh/runmesh/graph"
)

// Whatever an admin sends (any query, any variables), the API answers in
// GraphQL's format with a stable code: never a 5xx, never INTERNAL. An
// INTERNAL is an error no rule classified, which is a defect to fix. The
// fuzz engine gets the real handler over a real database.
func FuzzGraphQL(f *testing.F) {
	b := setup(f, func(o *graph.Options) { o.Log = slog.New(slog.DiscardHandler) })
	for _, seed := range []struct{ query, vars string }{
		{`{ viewer { role name } }`, `{}`},
		{`mutation($n: String!) { createOrganisation(input: {name: $n}) { id } }`, `{"n": "fuzz-org"}`},
		{`mutation($in: CreatePoolInput!) { createPool(input: $in) { id } }`, `{"in": {"name": "p", "leaseSeconds": 30}}`},
		{`mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, `{"in": {"poolId": "00000000-0000-0000-0000-000000000000", "image": "busybox", "command": ["true"], "claim": {"cores": 1, "wallClockSeconds": 60}}}`},
		{`mutation($id: ID!, $r: String!) { rejectRunner(id: $id, reason: $r) { id } }`, `{"id": "x", "r": "no"}`},
		{`{ jobs(first: 5) { nodes { id state events { nodes { type } } } } runners { nodes { id gpus { index } } } }`, `{}`},
		{`mutation($in: CreateAdminTokenInput!) { createAdminToken(input: $in) { token } }`, `{"in": {"name": "a", "role": "ORG_MEMBER", "ttlSeconds": 60}}`},
		{`{ auditLog(first: 2, after: "x") { nodes { id } } }`, `{}`},
	} {
		f.Add(seed.query, seed.vars, true)
		f.Add(seed.query, seed.vars, false)
	}
	f.Fuzz(func(t *testing.T, query, vars string, platform bool) {
		token := b.memberA
		if platform {
			token = b.platform
		}
		var v any
		if json.Unmarshal([]byte(vars), &v) != nil {
			v = map[string]any{}
		}
		body, err := json.Marshal(map[string]any{"query": query, "variables": v})
		if err != nil {
			return
		}
		r := b.doRaw(t, token, body)
		if r.Status >= 500 {
			t.Fatalf("%d for %q %q: %s", r.Status, query, vars, r.Raw)
		}
		if !json.Valid([]byte(r.Raw)) {
			t.Fatalf("not JSON for %q %q: %q", query, vars, r.Raw)
		}
		for _, e := range r.Errors {
			if e.Extensions["code"] == "INTERNAL" {
				t.Fatalf("INTERNAL for %q %q: %s", query, vars, r.Raw)
			}
		}
	})
}
