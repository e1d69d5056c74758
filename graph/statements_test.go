package graph_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/runnerapi"
)

// statements counts the SQL statements a pool runs.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool gives a fresh database whose statements counter counts, with
// an organisation and one of its pools.
func countedPool(t *testing.T) (*statements, *pgxpool.Pool, *controlplanetest.Services, record.Organisation, record.Pool) {
	t.Helper()
	ctx := context.Background()
	counter := &statements{}
	cfg, err := pgxpool.ParseConfig(controlplanetest.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := controlplanetest.NewServices(t, pool, nil)
	org, err := s.Tenancy.CreateOrganisation(ctx, "org")
	require.NoError(t, err)
	p, err := s.Tenancy.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu"})
	require.NoError(t, err)
	return counter, pool, s, org, p
}

// TestRunnerListRunsAConstantNumberOfStatements lists runners with their
// GPUs, pools, organisations and certificates: the statements it costs must
// not grow with the number of runners.
func TestRunnerListRunsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	count := func(runners int) (int64, int) {
		counter, pool, s, org, p := countedPool(t)
		gpus := make([]runnerapi.GPU, 8)
		for i := range gpus {
			gpus[i] = runnerapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H200", MemoryTotalMiB: 143771, Healthy: true}
		}
		gpuJSON, _ := json.Marshal(gpus)
		_, err := pool.Exec(ctx, `
			WITH t AS (
				INSERT INTO enrolment_tokens (pool_id, token_hash, expires_at, used_at)
				SELECT $1, sha256(('token-' || g)::bytea), now() + interval '1 hour', now() FROM generate_series(1, $2) g
				RETURNING id, token_hash)
			INSERT INTO runners (pool_id, name, status, public_key, fingerprint, csr, enrolment_token_id, gpus, gpu_count, gpus_healthy, last_heartbeat_at)
			SELECT $1, 'runner-' || left(encode(t.token_hash, 'hex'), 16), 'APPROVED', sha256(t.token_hash), 'SHA256:x', '\x00', t.id, $3::jsonb, 8, 8, now()
			FROM t`, p.ID, runners, gpuJSON)
		require.NoError(t, err)
		made, err := s.Tenancy.CreateAdmin(ctx, tenancy.NewAdmin{Name: "a", Role: record.RoleOrgAdmin, OrganisationID: &org.ID})
		require.NoError(t, err)

		b := &testBundle{handler: graph.NewHandler(s.GraphOptions())}
		counter.n.Store(0)
		r := b.do(t, made.Token, `{ runners(first: 500) { nodes { id name online takingWork pool { name runnerSeen organisation { name } } organisation { name }
			certificate { serial } capacity { cores } labels { key } gpus { uuid memoryTotalMiB utilisationPercent healthy } holds { gpus } } } }`, nil)
		require.Empty(t, r.Errors, r.Raw)
		listed := r.Data["runners"].(map[string]any)["nodes"].([]any)
		require.Len(t, listed, runners)
		require.Len(t, listed[0].(map[string]any)["gpus"], 8)
		return counter.n.Load(), len(listed)
	}
	few, _ := count(10)
	many, n := count(500)
	t.Logf("%d statements for 10 runners, %d for %d runners with 8 GPUs each", few, many, n)
	require.Equal(t, few, many)
	require.LessOrEqual(t, many, int64(8))
}

// TestJobListRunsAConstantNumberOfStatements lists jobs with their events,
// runs and logs: one statement each, whatever the number of jobs.
func TestJobListRunsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	count := func(jobs int) int64 {
		counter, pool, s, org, p := countedPool(t)
		batch := make([]queue.Submission, jobs)
		for i := range batch {
			batch[i] = queue.Submission{PoolID: p.ID, Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: "default"}
		}
		_, _, err := s.Queue.SubmitAll(ctx, record.AllOrganisations(), batch)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO job_logs (job_id, attempt, seq, data) SELECT id, 1, 0, 'hello' FROM jobs`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO job_runs (job_id, attempt, runner_id, runner_name) SELECT id, 1, gen_random_uuid(), 'r' FROM jobs`)
		require.NoError(t, err)
		made, err := s.Tenancy.CreateAdmin(ctx, tenancy.NewAdmin{Name: "a", Role: record.RoleOrgMember, OrganisationID: &org.ID})
		require.NoError(t, err)

		b := &testBundle{handler: graph.NewHandler(s.GraphOptions())}
		counter.n.Store(0)
		r := b.do(t, made.Token, `{ jobs(first: 1000) { nodes { id events { nodes { type } } runs { attempt } logs } } }`, nil)
		require.Empty(t, r.Errors, r.Raw)
		listed := r.Data["jobs"].(map[string]any)["nodes"].([]any)
		require.Len(t, listed, jobs)
		first := listed[0].(map[string]any)
		require.Equal(t, []any{map[string]any{"type": "SUBMITTED"}}, first["events"].(map[string]any)["nodes"])
		require.Equal(t, "hello", first["logs"])
		require.Equal(t, []any{map[string]any{"attempt": 1.0}}, first["runs"])
		n := counter.n.Load()

		// A later page, keyset-paged, costs what the first does.
		const page = `query($a: String) { jobs(first: 5, after: $a) { nodes { id events { nodes { type } } runs { attempt } logs } pageInfo { endCursor } } }`
		counter.n.Store(0)
		r = b.do(t, made.Token, page, map[string]any{"a": nil})
		require.Empty(t, r.Errors, r.Raw)
		firstPage := counter.n.Load()
		var after any
		for range jobs / 5 / 2 {
			r = b.do(t, made.Token, page, map[string]any{"a": after})
			after = dig(r.Data, "jobs", "pageInfo", "endCursor")
		}
		counter.n.Store(0)
		r = b.do(t, made.Token, page, map[string]any{"a": after})
		require.Empty(t, r.Errors, r.Raw)
		require.Len(t, dig(r.Data, "jobs", "nodes"), 5)
		require.Equal(t, firstPage, counter.n.Load(), "statements for a page in the middle, and for the first")
		return n
	}
	few, many := count(10), count(500)
	t.Logf("%d statements for 10 jobs, %d for 500", few, many)
	require.Equal(t, few, many)
	require.LessOrEqual(t, many, int64(6), "the caller, the list (its pools', and what it submitted to the platform's), and its events, runs and logs")
}
