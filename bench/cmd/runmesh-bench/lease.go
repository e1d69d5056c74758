package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type leaseOptions struct {
	jobs       int
	runners    int
	submitters int
	batch      int
	samples    int
	// river configures the River client the goal is judged against.
	river riverSettings
	// eachResult: a request per result instead of one per lease answer.
	eachResult bool
	// leaseMax is what each simulated runner asks for in a lease request.
	leaseMax int
	// rounds of each throughput run; the medians are reported.
	rounds int
	// skipRiver runs runmesh alone (comparing two builds of it).
	skipRiver bool
	// pgStats prints, for each throughput run, the statements PostgreSQL
	// spent its time on (pg_stat_statements) and the WAL it wrote, per job.
	pgStats bool
	// isolated measures PostgreSQL's CPU per job for each step on its own
	// (benchIsolated) instead of the throughput run.
	isolated bool
}

// simInstance is the agent instance every simulated runner leases as.
const simInstance = "00000000-0000-4000-8000-00000000beef"

// ratioText writes a ratio with two decimals; one just under 1, which
// two decimals would round up to "1.00" beside a verdict of NOT met, is
// cut to three.
func ratioText(r float64) string {
	if r < 1 && r >= 0.995 {
		return fmt.Sprintf("%.3f", math.Floor(r*1000)/1000)
	}
	return fmt.Sprintf("%.2f", r)
}

// round is one throughput run: jobs per second, and the cores used.
type round struct {
	rate float64
	cpu  cores
}

// cores is CPU time over a run's wall time: this process's, PostgreSQL's;
// and what this process allocated a second (where measured).
type cores struct {
	self, postgres float64
	allocs         allocRate
}

// goAllocs is what this process has allocated so far.
type goAllocs struct{ objects, bytes uint64 }

// readAllocs reads it (stopping the world for a moment).
func readAllocs() goAllocs {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return goAllocs{m.Mallocs, m.TotalAlloc}
}

func (a goAllocs) sub(b goAllocs) goAllocs { return goAllocs{a.objects - b.objects, a.bytes - b.bytes} }

// allocRate is allocations a second: objects and bytes.
type allocRate struct{ objects, bytes float64 }

func (a goAllocs) over(d time.Duration) allocRate {
	return allocRate{float64(a.objects) / d.Seconds(), float64(a.bytes) / d.Seconds()}
}

// allocsPerJob is what this process allocated for a job in rs, objects
// and bytes: like CPU per job, it moves little with the machine's load.
func allocsPerJob(rs []round) string {
	var objects, bytes float64
	for _, r := range rs {
		objects += r.cpu.allocs.objects / r.rate
		bytes += r.cpu.allocs.bytes / r.rate
	}
	return fmt.Sprintf("%.0f objects, %.1f KB", objects/float64(len(rs)), bytes/float64(len(rs))/1000)
}

func coresOver(u cpuUse, d time.Duration) cores {
	return cores{self: u.self.Seconds() / d.Seconds(), postgres: u.postgres.Seconds() / d.Seconds()}
}

// median is the round with the median rate (the lower middle one of an
// even count).
func median(rs []round) round { return medianBy(rs, func(r round) float64 { return r.rate }) }

// medianBy is the element of xs with the median key (the lower middle one
// of an even count).
func medianBy[T any](xs []T, key func(T) float64) T {
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return s[(len(s)-1)/2]
}

// cpuPerJob is the CPU time a job took in rs, this process's or
// PostgreSQL's: the rounds' CPU over their jobs. Unlike a rate it moves
// little with what else the machine runs.
func cpuPerJob(rs []round, postgres bool) string {
	var sum float64
	for _, r := range rs {
		c := r.cpu.self
		if postgres {
			c = r.cpu.postgres
		}
		sum += c / r.rate // cores / (jobs/s) = CPU seconds a job
	}
	return fmt.Sprintf("%.1f µs", sum/float64(len(rs))*1e6)
}

func rates(rs []round) string {
	return listed(rs, func(r round) string { return fmt.Sprintf("%.0f", r.rate) })
}

// listed is xs, each as f writes it, comma-separated.
func listed[T any](xs []T, f func(T) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, ", ")
}

// NoopArgs is River's benchmark job.
type NoopArgs struct{}

// Kind names the job for River.
func (NoopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// riverSettings are the River client settings that bound its throughput.
// River fetches at most MaxWorkers jobs at most every FetchCooldown, so its
// defaults (100 ms) cap it at 10 jobs/s per worker whatever the machine.
// The defaults here are those of River's own benchmark (`river bench`):
// 2,000 workers, a 2 ms cooldown and a 20 ms poll interval.
type riverSettings struct {
	workers  int
	cooldown time.Duration
	poll     time.Duration
}

// migrateRiver creates River's tables, once for all rounds.
func migrateRiver(ctx context.Context, e *benchEnv) error {
	m, err := rivermigrate.New(riverpgxv5.New(e.pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// benchRiver inserts n no-op jobs with InsertMany, batch at a time, and
// works them. It returns the time from the client running to the last
// completion and the CPU used meanwhile (sample reads it).
func benchRiver(ctx context.Context, e *benchEnv, n, batch int, s riverSettings, sample func() cpuUse) (time.Duration, cpuUse, error) {
	driver := riverpgxv5.New(e.pool)
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.workers}},
		Workers:           workers,
		FetchCooldown:     s.cooldown,
		FetchPollInterval: s.poll,
	})
	if err != nil {
		return 0, cpuUse{}, err
	}
	// A channel that holds every completion: River drops events that do
	// not fit (its default holds 1,000), and the count would never end.
	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return 0, cpuUse{}, err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	// From the client running, as runmesh's rounds start with the server
	// up: the client's start-up is not River's throughput.
	cpu0, start := sample(), time.Now()
	for sent := 0; sent < n; {
		params := make([]river.InsertManyParams, min(batch, n-sent))
		for i := range params {
			params[i] = river.InsertManyParams{Args: NoopArgs{}}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, cpuUse{}, err
		}
		sent += len(params)
	}
	for got := 0; got < n; got++ {
		select {
		case <-completed:
		case <-time.After(time.Minute):
			return 0, cpuUse{}, fmt.Errorf("only %d of %d River jobs completed", got, n)
		}
	}
	return time.Since(start), sample().sub(cpu0), nil
}

// resetPGStats starts a report's count: it returns where the WAL is now.
func resetPGStats(ctx context.Context, e *benchEnv, on bool) (walStart string, err error) {
	if !on {
		return "", nil
	}
	err = e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text FROM pg_stat_statements_reset()`).Scan(&walStart)
	return walStart, err
}

// writePGStats reports what PostgreSQL did for one throughput run, per job:
// the WAL it wrote, the statements it ran (transactions' BEGIN and COMMIT
// among them) and the time they took, and the statements that took the
// most time (planning and executing; with the CPU busy, time waiting for it
// is counted too). Statements per job, unlike the time, do not move with
// the machine's load.
func writePGStats(ctx context.Context, e *benchEnv, on bool, walStart, name string, jobs int, w io.Writer) error {
	if !on {
		return nil
	}
	n := float64(jobs)
	var wal, calls, total float64
	if err := e.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, walStart).Scan(&wal); err != nil {
		return err
	}
	var jitCompiled, jitTime float64
	if err := e.pool.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(total_plan_time + total_exec_time), 0),
		       coalesce(sum(jit_functions), 0)::float8,
		       coalesce(sum(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time), 0)
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%'`).Scan(&calls, &total, &jitCompiled, &jitTime); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: per job %.0f WAL bytes, %.1f µs of statement time (%.1f of it compiling %.0f functions, JIT); %.1f statements per 1,000 jobs\n",
		name, wal/n, total*1000/n, jitTime*1000/n, jitCompiled, calls*1000/n)
	rows, err := e.pool.Query(ctx, `
		SELECT total_plan_time, total_exec_time, plans, calls, rows, wal_bytes::float8, left(regexp_replace(query, '\s+', ' ', 'g'), 80)
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_plan_time + total_exec_time DESC LIMIT 20`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "  %7s %7s %8s %8s %9s %8s %7s  %s\n", "calls", "plans", "plan", "execute", "per call", "rows", "WAL", "statement (calls and plans per 1,000 jobs; µs and WAL bytes per job; µs and rows per call)")
	for rows.Next() {
		var plan, exec, walBytes float64
		var plans, c, nrows int64
		var query string
		if err := rows.Scan(&plan, &exec, &plans, &c, &nrows, &walBytes, &query); err != nil {
			return err
		}
		fmt.Fprintf(w, "  %7.1f %7.1f %8.1f %8.1f %9.0f %8.1f %7.0f  %s\n", float64(c)*1000/n, float64(plans)*1000/n, plan*1000/n, exec*1000/n,
			(plan+exec)*1000/float64(c), float64(nrows)/float64(c), walBytes/n, query)
	}
	return rows.Err()
}
