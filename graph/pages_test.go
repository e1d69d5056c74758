package graph_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/graph"
)

// submitN queues n one-core jobs of kind in the bundle's pool A.
func (b *testBundle) submitN(t *testing.T, n int, kind string) {
	t.Helper()
	batch := make([]queue.Submission, n)
	for i := range batch {
		batch[i] = queue.Submission{PoolID: b.poolA.ID, Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: kind}
	}
	_, _, err := b.services.Queue.SubmitAll(context.Background(), record.AllOrganisations(), batch)
	require.NoError(t, err)
}

// pages walks a connection a page of first at a time and returns every
// node's id, in order.
func (b *testBundle) pages(t *testing.T, token, query string, vars map[string]any, field string) (ids []string, pages int) {
	t.Helper()
	var after any
	for {
		v := map[string]any{"after": after}
		for k, x := range vars {
			v[k] = x
		}
		r := b.do(t, token, query, v)
		require.Empty(t, r.Errors, r.Raw)
		pages++
		for _, n := range nodes(r, field) {
			ids = append(ids, n.(map[string]any)["id"].(string))
		}
		if dig(r.Data, field, "pageInfo", "hasNextPage") != true {
			return ids, pages
		}
		after = dig(r.Data, field, "pageInfo", "endCursor")
		require.NotNil(t, after)
	}
}

func TestJobsPageThroughEveryJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.submitN(t, 23, "default")
	b.submitN(t, 4, "render")
	// When the later batch was submitted, as the database stamped it.
	var middle time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT min(submitted_at) FROM jobs WHERE kind = 'render'").Scan(&middle))
	const q = `query($after: String, $kind: String, $since: Time, $first: Int! = 10) {
		jobs(first: $first, after: $after, kind: $kind, submittedAfter: $since) { nodes { id } pageInfo { hasNextPage endCursor } edges { cursor } } }`
	ids, pages := b.pages(t, b.memberA, q, nil, "jobs")
	require.Len(t, ids, 27)
	require.Equal(t, 3, pages)
	seen := map[string]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "a job on two pages")
		seen[id] = true
	}
	exact, pages := b.pages(t, b.memberA, q, map[string]any{"first": 9}, "jobs")
	require.Equal(t, ids, exact)
	require.Equal(t, 3, pages, "a last page that is full says no page follows")
	render, _ := b.pages(t, b.memberA, q, map[string]any{"kind": "render"}, "jobs")
	require.Equal(t, ids[:4], render, "newest first, of one kind")
	since, _ := b.pages(t, b.memberA, q, map[string]any{"since": middle.Format(time.RFC3339Nano)}, "jobs")
	require.Equal(t, ids[:4], since, "submitted after a time")
	require.Empty(t, nodes(b.do(t, b.adminB, `{ jobs { nodes { id } } }`, nil), "jobs"), "another organisation's jobs")

	// The first page's last edge is where the second begins.
	r := b.do(t, b.memberA, q, nil)
	edges := dig(r.Data, "jobs", "edges").([]any)
	require.Equal(t, dig(r.Data, "jobs", "pageInfo", "endCursor"), edges[len(edges)-1].(map[string]any)["cursor"])
}

func TestPagingArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.services.ApprovedRunner(t, b.poolA.ID, controlplanetest.Runner{Name: "r-1", PublicKey: make([]byte, 32), CSR: []byte{0}, Cores: 1})
	runnersCursor := dig(b.do(t, b.platform, `{ runners { pageInfo { endCursor } } }`, nil).Data, "runners", "pageInfo", "endCursor")
	require.NotNil(t, runnersCursor)
	require.Nil(t, dig(b.do(t, b.platform, `query($a: String) { runners(after: $a) { pageInfo { endCursor } } }`, map[string]any{"a": runnersCursor}).Data,
		"runners", "pageInfo", "endCursor"), "an empty page has no end")
	b.do(t, b.platform, `mutation { createOrganisation(input: {name: "c"}) { id } }`, nil)
	audit := b.do(t, b.platform, `{ auditLog(first: 1) { pageInfo { endCursor } } }`, nil)
	auditCursor := dig(audit.Data, "auditLog", "pageInfo", "endCursor")
	require.NotNil(t, auditCursor)
	for name, c := range map[string]struct {
		query string
		vars  map[string]any
		msg   string
	}{
		"first 0":                {`{ jobs(first: 0) { nodes { id } } }`, nil, "first: between 1 and 1000"},
		"first too large":        {`{ jobs(first: 1001) { nodes { id } } }`, nil, "first: between 1 and 1000"},
		"not a cursor":           {`{ jobs(after: "nonsense") { nodes { id } } }`, nil, "after: not a cursor of this list"},
		"another list's cursor":  {`query($a: String) { jobs(after: $a) { nodes { id } } }`, map[string]any{"a": auditCursor}, "after: not a cursor of this list"},
		"a label without a key":  {`{ runners(label: "=gpu") { nodes { id } } }`, nil, "label: key=value, or a key"},
		"audit first over 500":   {`{ auditLog(first: 501) { nodes { id } } }`, nil, "first: between 1 and 500"},
		"a runner's runs page 0": {`{ runners { nodes { runs(first: 0) { nodes { attempt } } } } }`, nil, "first: between 1 and 1000"},
	} {
		r := b.do(t, b.platform, c.query, c.vars)
		require.Equal(t, graph.CodeBadInput, r.code(), "%s: %s", name, r.Raw)
		require.Equal(t, c.msg, r.Errors[0].Message, name)
	}
}

func TestHoldsAndRunsAreListed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	runner := b.services.ApprovedRunner(t, b.poolA.ID, controlplanetest.Runner{Name: "gpu-01", PublicKey: make([]byte, 32), CSR: []byte{0}, Cores: 8, MemoryMiB: 1024})
	r := b.do(t, b.adminA, `mutation($r: ID!) { createHold(runnerId: $r, gpus: 1, reason: "bad fan", durationSeconds: 3600) { id } }`, map[string]any{"r": runner})
	require.Empty(t, r.Errors, r.Raw)
	const q = `query($r: ID!, $p: ID!) {
		runner(id: $r) { holds { reason gpus createdBy { name } until } ended: holds(includeEnded: true) { reason } }
		pool(id: $p) { holds { reason runner { name } } } }`
	r = b.do(t, b.adminA, q, map[string]any{"r": runner, "p": b.poolA.ID})
	require.Empty(t, r.Errors, r.Raw)
	hold := dig(r.Data, "runner", "holds").([]any)[0].(map[string]any)
	require.Equal(t, "bad fan", hold["reason"])
	require.Equal(t, "alice", dig(hold, "createdBy", "name"))
	require.Equal(t, "gpu-01", dig(r.Data, "pool", "holds").([]any)[0].(map[string]any)["runner"].(map[string]any)["name"])

	// Ended attempts, newest first, for the runner and across the organisation.
	b.submitN(t, 3, "default")
	_, err := b.pool.Exec(ctx, `INSERT INTO job_runs (job_id, attempt, runner_id, runner_name, finished_at, exit_code)
		SELECT id, 1, $1, 'gpu-01', now() - (row_number() OVER (ORDER BY id)) * interval '1 minute', 0 FROM jobs`, runner)
	require.NoError(t, err)
	const runs = `query($r: ID!, $after: String) {
		runner(id: $r) { runs(first: 2, after: $after) { nodes { attempt finishedAt job { id } } pageInfo { hasNextPage endCursor } } } }`
	r = b.do(t, b.adminA, runs, map[string]any{"r": runner})
	require.Empty(t, r.Errors, r.Raw)
	page := dig(r.Data, "runner", "runs").(map[string]any)
	require.Len(t, page["nodes"], 2)
	require.Equal(t, true, dig(page, "pageInfo", "hasNextPage"))
	r = b.do(t, b.adminA, runs, map[string]any{"r": runner, "after": dig(page, "pageInfo", "endCursor")})
	require.Empty(t, r.Errors, r.Raw)
	require.Len(t, dig(r.Data, "runner", "runs", "nodes"), 1)

	all := b.do(t, b.memberA, `{ runs { nodes { job { id } runnerName finishedAt } } }`, nil)
	require.Empty(t, all.Errors, all.Raw)
	listed := nodes(all, "runs")
	require.Len(t, listed, 3)
	require.Nil(t, listed[0].(map[string]any)["runnerName"], "members see that a job ran, not where")
	require.Greater(t, listed[0].(map[string]any)["finishedAt"], listed[1].(map[string]any)["finishedAt"], "newest first")
	require.Empty(t, nodes(b.do(t, b.adminB, `{ runs { nodes { attempt } } }`, nil), "runs"), "another organisation's runs")
}

func TestRunnersAreFilteredByLabel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{"a100", "h100", "cpu"} {
		id := b.services.ApprovedRunner(t, b.poolA.ID, controlplanetest.Runner{Name: n, PublicKey: []byte(strings.Repeat(n, 32))[:32], CSR: []byte{0}, Cores: 8})
		labels := `{"labels": [{"key": "zone", "value": "eu", "source": "declared"}]}`
		if n != "cpu" {
			labels = `{"labels": [{"key": "gpu", "value": "` + n + `", "source": "detected"}, {"key": "zone", "value": "eu", "source": "declared"}]}`
		}
		_, err := b.pool.Exec(context.Background(), "UPDATE runners SET capacity = $2::jsonb WHERE id = $1", id, labels)
		require.NoError(t, err)
	}
	names := func(label string) (out []string) {
		r := b.do(t, b.adminA, `query($l: String) { runners(label: $l) { nodes { name } } }`, map[string]any{"l": label})
		require.Empty(t, r.Errors, r.Raw)
		for _, n := range nodes(r, "runners") {
			out = append(out, n.(map[string]any)["name"].(string))
		}
		return out
	}
	require.Equal(t, []string{"a100", "h100"}, names("gpu"))
	require.Equal(t, []string{"h100"}, names("gpu=h100"))
	require.Equal(t, []string{"a100", "h100", "cpu"}, names("zone=eu"))
	require.Empty(t, names("zone=us"))
}

// GraphQL over HTTP: GET for queries, POST for anything, the media types
// and status codes of the specification.
func TestGraphQLOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	send := func(method, query, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "/graphql?query="+url.QueryEscape(query), nil)
		req.Header.Set("Authorization", "Bearer "+b.platform)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		return rec
	}
	rec := send(http.MethodGet, `{ viewer { role } }`, "application/graphql-response+json")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/graphql-response+json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"data":{"viewer":{"role":"PLATFORM_ADMIN"}}}`, rec.Body.String())
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))

	before := b.counts(t)
	rec = send(http.MethodGet, `mutation { createOrganisation(input: {name: "by-get"}) { id } }`, "")
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code, rec.Body.String())
	require.Equal(t, "POST", rec.Header().Get("Allow"))
	require.Equal(t, before, b.counts(t), "a mutation by GET changes nothing")

	rec = send(http.MethodPut, `{ viewer { role } }`, "")
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	require.Equal(t, "GET, POST", rec.Header().Get("Allow"))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))

	rec = send(http.MethodGet, `{ viewer { nosuchfield } }`, "application/json")
	require.Equal(t, http.StatusOK, rec.Code, "a request that does not validate, under application/json")
	require.Contains(t, rec.Body.String(), `"errors"`)
	rec = send(http.MethodGet, `{ viewer { nosuchfield } }`, "application/graphql-response+json")
	require.Equal(t, http.StatusBadRequest, rec.Code, "and under application/graphql-response+json")

	rec = send(http.MethodGet, `subscription { runnerEvents(poolId: "`+b.poolA.ID.String()+`") { id } }`, "application/json")
	require.Contains(t, rec.Body.String(), "subscriptions need a websocket", "one event for a whole stream, otherwise")
	r0 := b.do(t, b.platform, `subscription($p: ID!) { runnerEvents(poolId: $p) { id } }`, map[string]any{"p": b.poolA.ID})
	require.Equal(t, graph.CodeBadInput, r0.code(), r0.Raw)

	r := b.doRaw(t, b.platform, []byte(` [{"query": "{ viewer { role } }"}, {"query": "{ viewer { name } }"}]`))
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, graph.CodeBadInput, r.code())
	require.Equal(t, "batched operations are not supported: send one operation a request", r.Errors[0].Message)
	require.NotContains(t, r.Raw, "viewer", "the body is not echoed")
}
