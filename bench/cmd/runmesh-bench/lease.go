package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
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

// cores is CPU time over a run's wall time: this process's, PostgreSQL's.
type cores struct{ self, postgres float64 }

func coresOver(u cpuUse, d time.Duration) cores {
	return cores{u.self.Seconds() / d.Seconds(), u.postgres.Seconds() / d.Seconds()}
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
// the WAL it wrote, and the statements that took the most time (planning
// and executing; with the CPU busy, time waiting for it is counted too).
func writePGStats(ctx context.Context, e *benchEnv, on bool, walStart, name string, jobs int, w io.Writer) error {
	if !on {
		return nil
	}
	n := float64(jobs)
	var wal float64
	if err := e.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, walStart).Scan(&wal); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %.0f WAL bytes per job\n", name, wal/n)
	rows, err := e.pool.Query(ctx, `
		SELECT total_plan_time, total_exec_time, plans, calls, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 80)
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_plan_time + total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "  %8s %8s %10s %7s %7s %7s  %s\n", "plan", "execute", "per call", "plans", "calls", "rows", "statement (µs per job, then per call)")
	for rows.Next() {
		var plan, exec float64
		var plans, calls, nrows int64
		var query string
		if err := rows.Scan(&plan, &exec, &plans, &calls, &nrows, &query); err != nil {
			return err
		}
		fmt.Fprintf(w, "  %8.1f %8.1f %10.0f %7d %7d %7d  %s\n", plan*1000/n, exec*1000/n, (plan+exec)*1000/float64(calls), plans, calls, nrows, query)
	}
	return rows.Err()
}
