package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/internal/dbsqlc"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// labelled sets a runner's labels as a capacity report would.
func (b jobsBundle) labelled(t *testing.T, r uuid.UUID, labels map[string]string) {
	t.Helper()
	var list []runnerapi.Label
	for k, v := range labels {
		list = append(list, runnerapi.Label{Key: k, Value: v, Source: runnerapi.LabelDeclared})
	}
	doc, err := json.Marshal(list)
	require.NoError(t, err)
	_, err = b.db.Exec(context.Background(), `UPDATE runners SET capacity = jsonb_set(capacity, '{labels}', $2) WHERE id = $1`, r, doc)
	require.NoError(t, err)
}

// selecting is a job modifier: the job's selector.
func selecting(t *testing.T, selector string) func(*store.NewJob) {
	return func(n *store.NewJob) {
		reqs, err := runnerapi.ParseSelector(selector)
		require.NoError(t, err)
		n.Options.Selector = reqs
	}
}

// The claim keeps a job with a selector from every runner whose labels do
// not meet it, and gives it to one whose labels do.
func TestAJobGoesOnlyToARunnerItsSelectorMatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	a, c := b.runner(t, 8, 65536, 0), b.runner(t, 8, 65536, 0)
	b.labelled(t, a, map[string]string{"zone": "a", "runmesh.io/arch": "amd64"})
	b.labelled(t, c, map[string]string{"zone": "c", "team": "ml", "runmesh.io/arch": "amd64"})
	for _, tc := range []struct {
		selector string
		runner   uuid.UUID
	}{
		{"zone=c", c},
		{"zone in (b,c)", c},
		{"zone!=a", c},
		{"zone notin (a)", c},
		{"team", c},
		{"!team", a},
		{"runmesh.io/arch=amd64,!team", a},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, selecting(t, tc.selector))
			other := a
			if tc.runner == a {
				other = c
			}
			_, ok, err := b.store.ClaimJob(ctx, anything(other))
			require.NoError(t, err)
			require.False(t, ok, "the other runner's labels do not meet %q", tc.selector)
			got, ok, err := b.store.ClaimJob(ctx, anything(tc.runner))
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, j.ID, got.ID)
			require.Equal(t, tc.selector, runnerapi.FormatSelector(got.Options.Selector), "kept as submitted")
		})
	}
}

// The claim's SQL matcher and runnerapi.Matches agree on every selector
// and label set tried: the table below, then random ones.
func TestTheSQLMatcherAgreesWithMatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	keys, values := []string{"a", "b", "x.io/c"}, []string{"1", "2", ""}
	ops := []string{runnerapi.OpEquals, runnerapi.OpNotEquals, runnerapi.OpIn, runnerapi.OpNotIn, runnerapi.OpExists, runnerapi.OpNotExists}
	rnd := rand.New(rand.NewPCG(1, 2))
	check := func(reqs []runnerapi.Requirement, labels map[string]string) {
		sel, err := json.Marshal(reqs)
		require.NoError(t, err)
		// As a capacity report has them, read as the runners' column is.
		var c runnerapi.Capacity
		for k, v := range labels {
			c.Labels = append(c.Labels, runnerapi.Label{Key: k, Value: v, Source: runnerapi.LabelDeclared})
		}
		capacity, err := json.Marshal(c)
		require.NoError(t, err)
		var got bool
		require.NoError(t, b.db.QueryRow(ctx, `SELECT runmesh_selects($1::jsonb, runmesh_labels($2::jsonb))`, sel, capacity).Scan(&got))
		require.Equal(t, runnerapi.Matches(reqs, labels), got, "selector %s, capacity %s", sel, capacity)
	}
	for range 400 {
		var reqs []runnerapi.Requirement
		for range 1 + rnd.IntN(3) {
			r := runnerapi.Requirement{Key: keys[rnd.IntN(len(keys))], Op: ops[rnd.IntN(len(ops))]}
			switch r.Op {
			case runnerapi.OpEquals, runnerapi.OpNotEquals:
				r.Values = []string{values[rnd.IntN(len(values))]}
			case runnerapi.OpIn, runnerapi.OpNotIn:
				r.Values = []string{values[rnd.IntN(2)], values[rnd.IntN(3)]}
			}
			reqs = append(reqs, r)
		}
		labels := map[string]string{}
		for _, k := range keys {
			if rnd.IntN(3) > 0 {
				labels[k] = values[rnd.IntN(len(values))]
			}
		}
		check(reqs, labels)
	}
	var got *bool
	require.NoError(t, b.db.QueryRow(ctx, `SELECT runmesh_selects(NULL, '{}')`).Scan(&got))
	require.True(t, *got, "no selector selects every runner")
	require.NoError(t, b.db.QueryRow(ctx, `SELECT runmesh_selects('[{"key":"a","op":"~"}]', '{"a":"1"}')`).Scan(&got))
	require.False(t, *got, "an operator it does not know meets nothing")

	for capacity, want := range map[string]string{
		`{}`:                         `{}`,
		`{"labels": {"a": "1"}}`:     `{}`,
		`{"labels": [{"key": "a"}]}`: `{"a": ""}`,
		`{"labels": [{"key": 1}, {"key": "b", "value": "2"}]}`: `{"b": "2"}`,
	} {
		var same bool
		require.NoError(t, b.db.QueryRow(ctx, `SELECT runmesh_labels($1::jsonb) = $2::jsonb`, capacity, want).Scan(&same))
		require.True(t, same, "%s reads as %s", capacity, want)
	}
}

// waitFor has each runner claim and find nothing: each waits for work.
func (b jobsBundle) waitFor(t *testing.T, runners ...uuid.UUID) {
	t.Helper()
	for _, id := range runners {
		_, ok, err := b.store.ClaimJob(context.Background(), waiting(id))
		require.NoError(t, err)
		require.False(t, ok, "nothing to claim yet")
	}
}

// waiting is a claim of a runner that will wait for work.
func waiting(r uuid.UUID) record.ClaimRequest {
	c := anything(r)
	c.WaitSeconds = 30
	return c
}

// Among runners that would take a job, the one waiting with the least room
// (GPUs first) gets it: another passes over it while that one waits.
func TestAWaitingRunnerThatStrandsLessGetsTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	big, small := b.runner(t, 64, 1<<20, 8), b.runner(t, 64, 1<<20, 2)
	_, ok, err := b.store.ClaimJob(ctx, waiting(small))
	require.NoError(t, err)
	require.False(t, ok, "the queue is empty: small waits")

	one := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})
	_, ok, err = b.store.ClaimJob(ctx, waiting(big))
	require.NoError(t, err)
	require.False(t, ok, "small waits and strands less: big passes over the job")
	got, ok, err := b.store.ClaimJob(ctx, waiting(small))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, one.ID, got.ID)

	// small leased, so it no longer waits: big takes the next one.
	two := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})
	got, ok, err = b.store.ClaimJob(ctx, waiting(big))
	require.NoError(t, err)
	require.True(t, ok, "small is not waiting")
	require.Equal(t, two.ID, got.ID)
}

// A waiting runner is preferred only for the jobs it would take itself.
func TestAWaitingRunnerIsPreferredOnlyForWhatItWouldTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		job   func(*store.NewJob)
		small func(*record.ClaimRequest)
		then  func(b jobsBundle, small uuid.UUID)
	}{
		{name: "too big for it", job: func(n *store.NewJob) { n.Claim.GPUs = 4 }},
		{name: "past the largest job it runs", small: func(c *record.ClaimRequest) { c.Largest.Cores = 0.5 }},
		{name: "another kind", small: func(c *record.ClaimRequest) { c.Kinds = []string{"batch"} }},
		{name: "an image it cannot run", small: func(c *record.ClaimRequest) { c.UnavailableImages = []string{"busybox"} }},
		{name: "labels it lacks", job: selecting(t, "zone=big")},
		{name: "it no longer waits: its wait ended", small: func(c *record.ClaimRequest) {
			past := time.Now().Add(-time.Minute)
			c.Now = &past
		}},
		{name: "it is draining", then: func(b jobsBundle, small uuid.UUID) {
			_, err := b.db.Exec(ctx, `UPDATE runners SET draining = true WHERE id = $1`, small)
			require.NoError(t, err)
		}},
		{name: "it asked without waiting", small: func(c *record.ClaimRequest) { c.WaitSeconds = 0 }},
		{name: "it holds all it may", small: func(c *record.ClaimRequest) { c.MaxHeld = 1 }},
		// Whether a waiting runner's agent runs a mode is not recorded: an
		// interactive job is left to none, or one that does not would keep
		// it from every other.
		{name: "an interactive job", job: func(n *store.NewJob) { n.Options.Stdio = runnerapi.StdioTTY }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := jobsSetup(t)
			big, small := b.runner(t, 64, 1<<20, 8), b.runner(t, 64, 1<<20, 2)
			b.labelled(t, big, map[string]string{"zone": "big"})
			if tc.name == "it holds all it may" {
				b.leased(t, small, 1)
			}
			c := waiting(small)
			if tc.small != nil {
				tc.small(&c)
			}
			_, ok, err := b.store.ClaimJob(ctx, c)
			require.NoError(t, err)
			require.False(t, ok)
			if tc.then != nil {
				tc.then(b, small)
			}
			mods := []func(*store.NewJob){func(n *store.NewJob) { n.Claim.GPUs = 1 }}
			if tc.job != nil {
				mods = append(mods, tc.job)
			}
			j := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, mods...)
			bc := waiting(big)
			bc.Stdio = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe}
			got, ok, err := b.store.ClaimJob(ctx, bc)
			require.NoError(t, err)
			require.True(t, ok, "big takes it")
			require.Equal(t, j.ID, got.ID)
		})
	}
}

// An interactive job (TTY, PIPE) goes only to a runner whose agent named
// its mode in its request: an agent from before interactive jobs, which
// names none, would run it as a batch job. Its mode and idle timeout are
// kept with it, and a batch job goes to every agent as before.
func TestAnInteractiveJobGoesOnlyToARunnerThatRunsItsMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 0)
	tty := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) {
		n.Options.Stdio, n.Options.IdleTimeoutSeconds = runnerapi.StdioTTY, 600
	})
	_, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.False(t, ok, "an agent that names no mode")
	pipeOnly := anything(r)
	pipeOnly.Stdio = []runnerapi.Stdio{runnerapi.StdioPipe}
	_, ok, err = b.store.ClaimJob(ctx, pipeOnly)
	require.NoError(t, err)
	require.False(t, ok, "an agent that names another mode")

	batch := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	got, ok, err := b.store.ClaimJob(ctx, anything(r))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, batch.ID, got.ID, "a batch job goes to an agent that names no mode")
	require.Equal(t, record.JobOptions{}, got.Options)

	both := anything(r)
	both.Stdio = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe}
	got, ok, err = b.store.ClaimJob(ctx, both)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, tty.ID, got.ID)
	require.Equal(t, record.JobOptions{Stdio: runnerapi.StdioTTY, IdleTimeoutSeconds: 600}, got.Options)
}

// Room is compared GPUs first, then cores, then memory.
func TestLessStrandedComparesGPUsThenCoresThenMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name             string
		preferred, other [3]float64 // cores, MiB, GPUs
	}{
		{"fewer GPUs, more cores", [3]float64{64, 1 << 20, 1}, [3]float64{8, 1024, 2}},
		{"as many GPUs, fewer cores", [3]float64{8, 1 << 20, 2}, [3]float64{16, 1024, 2}},
		{"as many GPUs and cores, less memory", [3]float64{8, 1024, 2}, [3]float64{8, 2048, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := jobsSetup(t)
			p := b.runner(t, tc.preferred[0], int64(tc.preferred[1]), int(tc.preferred[2]))
			o := b.runner(t, tc.other[0], int64(tc.other[1]), int(tc.other[2]))
			b.waitFor(t, p, o)
			j := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})
			_, ok, err := b.store.ClaimJob(ctx, waiting(o))
			require.NoError(t, err)
			require.False(t, ok, "the other passes over it")
			got, ok, err := b.store.ClaimJob(ctx, waiting(p))
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, j.ID, got.ID)
		})
	}
}

// A waiting runner that leases wakes its pool when runners with more room
// wait: they may have passed over a job for it that it took no room for.
func TestARunnerThatStopsWaitingWakesItsPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := jobsSetup(t)
	r, big := b.runner(t, 8, 65536, 0), b.runner(t, 64, 65536, 0)
	b.waitFor(t, big, r)
	b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})

	l := listening(ctx, b.db)
	work := l.Subscribe(store.ChannelJobs)
	defer work.Close()
	_, ok, err := b.store.ClaimJob(ctx, waiting(r))
	require.NoError(t, err)
	require.True(t, ok)
	wakesPool(t, work, b.pool.ID)

	// Not waiting before, it wakes nobody.
	b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	drain(work)
	_, ok, err = b.store.ClaimJob(ctx, waiting(r))
	require.NoError(t, err)
	require.True(t, ok)
	wakesNobody(t, work, "was not waiting")

	// Waiting, with nobody of more room waiting, it wakes nobody either.
	_, err = b.db.Exec(ctx, `DELETE FROM runner_waits WHERE runner_id = $1`, big)
	require.NoError(t, err)
	_, ok, err = b.store.ClaimJob(ctx, waiting(r))
	require.NoError(t, err)
	require.False(t, ok)
	b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60})
	drain(work)
	_, ok, err = b.store.ClaimJob(ctx, waiting(r))
	require.NoError(t, err)
	require.True(t, ok)
	wakesNobody(t, work, "nobody waited for")
}

// Runners with as much room strand as much: neither waits for the other.
func TestRunnersAlikeDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	one, two := b.runner(t, 8, 65536, 2), b.runner(t, 8, 65536, 2)
	b.waitFor(t, one, two)
	j := b.submit(t, record.Claim{Cores: 1, GPUs: 1, WallClockSeconds: 60})
	// Each would be first by some order of ids: the later one asks.
	later := max(one.String(), two.String())
	got, ok, err := b.store.ClaimJob(ctx, waiting(uuid.MustParse(later)))
	require.NoError(t, err)
	require.True(t, ok, "the other, alike, waits too")
	require.Equal(t, j.ID, got.ID)
}

// BLOCKED says which rule no runner of the pool passes: the kind, the
// selector, or the size; and a job goes back to the queue once a runner
// could take it.
func TestBlockedJobsSayWhichRuleNoRunnerPasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobsSetup(t)
	r := b.runner(t, 8, 65536, 2)
	b.labelled(t, r, map[string]string{"zone": "a"})
	batch := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, func(n *store.NewJob) { n.Kind = "batch" })
	elsewhere := b.submit(t, record.Claim{Cores: 1, WallClockSeconds: 60}, selecting(t, "zone in (b,c)"))
	bigHere := b.submit(t, record.Claim{Cores: 1, GPUs: 4, WallClockSeconds: 60}, selecting(t, "zone=a"))
	reason := func(id uuid.UUID) (record.JobState, string) {
		j, err := b.store.Job(ctx, record.AllOrganisations(), id)
		require.NoError(t, err)
		return j.State, j.StateReason
	}

	res, err := b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 2, res.Blocked, "the kind is not blocked while the runner has not said which it runs")
	state, _ := reason(batch.ID)
	require.Equal(t, record.JobQueued, state)
	state, why := reason(elsewhere.ID)
	require.Equal(t, record.JobBlocked, state)
	require.Equal(t, `no approved runner of the pool that runs kind "default" matches its selector zone in (b,c)`, why)
	_, why = reason(bigHere.ID)
	require.Equal(t, "no approved runner of the pool could ever hold 1 cores, 0 MiB and 4 GPUs and match its selector zone=a", why)

	_, err = b.store.TouchWorkRequest(ctx, r, []string{"default"})
	require.NoError(t, err)
	res, err = b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 1, res.Blocked)
	state, why = reason(batch.ID)
	require.Equal(t, record.JobBlocked, state)
	require.Equal(t, `no approved runner of the pool runs jobs of kind "batch"`, why)

	// The runner now runs both kinds, in zone b: two of three can go.
	_, err = b.store.TouchWorkRequest(ctx, r, []string{"default", "batch"})
	require.NoError(t, err)
	b.labelled(t, r, map[string]string{"zone": "b"})
	res, err = b.sweep(ctx, sweepOptions{DefaultQueueTimeoutHours: 24})
	require.NoError(t, err)
	require.Equal(t, 2, res.Unblocked)
	for _, id := range []uuid.UUID{batch.ID, elsewhere.ID} {
		state, why = reason(id)
		require.Equal(t, record.JobQueued, state)
		require.Empty(t, why)
	}
	state, _ = reason(bigHere.ID)
	require.Equal(t, record.JobBlocked, state)
}

// claimedJob copies a claim's row column by column: a column added to
// jobs must be added there too.
func TestClaimedJobHasEveryColumn(t *testing.T) {
	job, row := reflect.TypeFor[dbsqlc.Job](), reflect.TypeFor[dbsqlc.ClaimJobsRow]()
	require.Equal(t, job.NumField()+1, row.NumField(), "the claim's row is a job row and stopped_asking")
	for i := range job.NumField() {
		require.Equal(t, job.Field(i).Name, row.Field(i).Name, fmt.Sprint("column ", i))
	}
	// Every field set in the row comes through.
	var r dbsqlc.ClaimJobsRow
	v := reflect.ValueOf(&r).Elem()
	for i := range job.NumField() {
		f := v.Field(i)
		switch x := f.Addr().Interface().(type) {
		case *uuid.UUID:
			*x = uuid.New()
		case *uuid.NullUUID:
			*x = uuid.NullUUID{UUID: uuid.New(), Valid: true}
		case *time.Time:
			*x = time.Now()
		default:
			switch f.Kind() {
			case reflect.Pointer:
				f.Set(reflect.New(f.Type().Elem()))
			case reflect.Slice:
				f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			case reflect.String:
				f.SetString("x")
			case reflect.Int32, reflect.Int64:
				f.SetInt(1)
			case reflect.Float64:
				f.SetFloat(1)
			case reflect.Bool:
				f.SetBool(true)
			default:
				t.Fatalf("field %s: a kind this test cannot fill (%s)", job.Field(i).Name, f.Kind())
			}
		}
	}
	got := reflect.ValueOf(store.ClaimedJob(r))
	for i := range job.NumField() {
		require.False(t, got.Field(i).IsZero(), "claimedJob drops %s", job.Field(i).Name)
	}
}
