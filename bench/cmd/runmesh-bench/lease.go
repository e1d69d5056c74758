package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
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

// benchLease measures the queue against a real control plane and a durable
// PostgreSQL: submit → lease → result throughput with simulated runners
// over mutual TLS; submit-to-lease latency with a runner already waiting;
// and, on the same PostgreSQL, River inserting and working no-op jobs.
func benchLease(ctx context.Context, o leaseOptions, out io.Writer) error {
	var settings []string
	if o.pgStats {
		settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all", "pg_stat_statements.track_planning=on"}
	}
	e, err := startEnv(ctx, settings...)
	if err != nil {
		return err
	}
	defer e.close()
	if o.pgStats {
		if _, err := e.pool.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
			return err
		}
	}
	var report strings.Builder
	roots := x509.NewCertPool()
	roots.AddCert(e.keys.Root)
	base := "https://" + e.runnerAddr
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	ids, certs, err := enrolFleet(ctx, e.admin(), e.poolID, base, anon, o.runners, 4, runnerapi.Capacity{
		Host: runnerapi.HostCapacity{Hostname: "sim", Cores: 64, MemoryMiB: 524288, MemoryAvailableMiB: 400000, DiskFreeMiB: 1 << 21}})
	if err != nil {
		return err
	}
	if o.isolated {
		return benchIsolated(ctx, e, mustUUID(ids[0]), mustUUID(e.poolID), o.jobs, o.batch, max(o.rounds, 3), out)
	}
	clients := make([]*http.Client, len(certs))
	for i, c := range certs {
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c, nil },
		}}}
	}
	// Simulated agents have no jobs from before: each sends the survivor
	// check a fresh host's agent sends, in its first heartbeat.
	for _, c := range clients {
		var resp runnerapi.HeartbeatResponse
		if err := postJSON(ctx, c, base+runnerapi.PathHeartbeat, runnerapi.HeartbeatRequest{AgentVersion: "bench",
			Capacity: runnerapi.Capacity{Host: runnerapi.HostCapacity{Hostname: "sim", Cores: 64, MemoryMiB: 524288, MemoryAvailableMiB: 400000, DiskFreeMiB: 1 << 21}},
			Recovery: &runnerapi.RecoveryProof{AgentInstance: simInstance, BootID: "bench", SurvivorsChecked: true, Isolated: true},
		}, &resp); err != nil {
			return fmt.Errorf("first heartbeat: %w", err)
		}
		if !resp.RecoveryRecorded {
			return errors.New("first heartbeat: the recovery proof was not recorded")
		}
	}
	// Submitters are in the server's process and submit through its queue,
	// as submitJobs does after parsing, and as River's InsertMany does.
	q := e.srv.Queue()
	noop := queue.Submission{PoolID: mustUUID(e.poolID), Image: "noop", Claim: record.Claim{Cores: 0.01, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"}
	submit := func() error {
		_, _, err := q.Submit(ctx, record.AllOrganisations(), noop)
		return err
	}
	// Bulk submission is what submitJobs does, as River's InsertMany is.
	submitMany := func(n int) error {
		batch := make([]queue.Submission, n)
		for i := range batch {
			batch[i] = noop
		}
		_, _, err := q.SubmitAll(ctx, record.AllOrganisations(), batch)
		return err
	}
	lease := func(c *http.Client, wait, max int) ([]runnerapi.Lease, error) {
		big := runnerapi.Resources{Cores: 1e6, MemoryMiB: 1 << 40, GPUs: 64}
		var resp runnerapi.LeaseResponse
		err := postJSON(ctx, c, base+runnerapi.PathLeases, runnerapi.LeaseRequest{Kinds: []string{"default"}, Largest: big, Free: big, Max: max, WaitSeconds: wait, AgentInstance: simInstance}, &resp)
		return resp.Leases, err
	}
	zero := 0
	finish := func(c *http.Client, l runnerapi.Lease) error {
		var resp runnerapi.ResultResponse
		return postJSON(ctx, c, base+runnerapi.PathLeaseResult(l.LeaseID), runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zero}, &resp)
	}

	finishAll := func(c *http.Client, ls []runnerapi.Lease) error {
		req := runnerapi.ResultsRequest{Results: make([]runnerapi.LeaseResult, len(ls))}
		for i, l := range ls {
			req.Results[i] = runnerapi.LeaseResult{LeaseID: l.LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zero}}
		}
		var resp runnerapi.ResultsResponse
		if err := postJSON(ctx, c, base+runnerapi.PathResults, req, &resp); err != nil {
			return err
		}
		for _, a := range resp.Results {
			if a.Error != nil {
				return fmt.Errorf("result for %s refused: %s", a.LeaseID, a.Error.Code)
			}
		}
		return nil
	}

	// Latency: a runner is already waiting when the job is submitted.
	var lat []time.Duration
	for range o.samples {
		got := make(chan []runnerapi.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			ls, err := lease(clients[0], 30, 1)
			if err != nil {
				errc <- err
				return
			}
			got <- ls
		}()
		time.Sleep(20 * time.Millisecond) // the long-poll is waiting now
		start := time.Now()
		if err := submit(); err != nil {
			return err
		}
		select {
		case ls := <-got:
			lat = append(lat, time.Since(start))
			for _, l := range ls {
				if err := finish(clients[0], l); err != nil {
					return err
				}
			}
		case err := <-errc:
			return err
		}
	}
	slices.Sort(lat)

	// Throughput: submitters and runners at once, until every job is done.
	// Each round submits its own jobs; the figures are the rounds' medians,
	// runmesh's and River's rounds taking turns on the same PostgreSQL.
	sample := func() cpuUse { return cpuSample(cpuPIDs{postmaster: e.cluster.PID()}) }
	ourRound := func() (float64, cores, error) {
		var submitted, done atomic.Int64
		// The clock and the CPU stop at the last accepted result: runners
		// still waiting for work after it only wait out their long-polls.
		var finished time.Time
		var cpuEnd cpuUse
		last := func() {
			finished, cpuEnd = time.Now(), sample()
		}
		cpu0 := sample()
		start := time.Now()
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for range o.submitters {
			wg.Go(func() {
				for {
					end := submitted.Add(int64(o.batch))
					n := min(int64(o.batch), int64(o.jobs)-(end-int64(o.batch)))
					if n <= 0 {
						return
					}
					if err := submitMany(int(n)); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		for _, c := range clients {
			wg.Go(func() {
				for done.Load() < int64(o.jobs) && firstErr.Load() == nil {
					ls, err := lease(c, 1, o.leaseMax)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					if !o.eachResult && len(ls) > 0 {
						// No-op jobs end together: the runner reports them
						// together, as an agent whose jobs end between two
						// reports does.
						if err := finishAll(c, ls); err != nil {
							firstErr.CompareAndSwap(nil, err)
							return
						}
						if done.Add(int64(len(ls))) == int64(o.jobs) {
							last()
						}
						continue
					}
					for _, l := range ls {
						if err := finish(c, l); err != nil {
							firstErr.CompareAndSwap(nil, err)
							return
						}
						if done.Add(1) == int64(o.jobs) {
							last()
						}
					}
				}
			})
		}
		wg.Wait()
		if err, ok := firstErr.Load().(error); ok {
			return 0, cores{}, err
		}
		elapsed := finished.Sub(start) // wg.Wait: finished was set
		return float64(o.jobs) / elapsed.Seconds(), coresOver(cpuEnd.sub(cpu0), elapsed), nil
	}
	riverRound := func() (float64, cores, error) {
		elapsed, cpu, err := benchRiver(ctx, e, o.jobs, o.batch, o.river, sample)
		if err != nil {
			return 0, cores{}, fmt.Errorf("river: %w", err)
		}
		return float64(o.jobs) / elapsed.Seconds(), coresOver(cpu, elapsed), nil
	}
	var ours, river []round
	// measure runs one round of one side, starting from the same state as
	// the other side's: the dead rows of the rounds before vacuumed, and a
	// checkpoint behind, so that neither pays for the other's. (Both keep
	// their finished jobs, as a queue in service does. Emptied tables, as
	// River's own benchmark starts from, leave runmesh planning its
	// statements for an empty table: see README.) A round into nil is a
	// warm-up, run the same way and not counted.
	if !o.skipRiver {
		if err := migrateRiver(ctx, e); err != nil {
			return fmt.Errorf("river: %w", err)
		}
	}
	measure := func(name string, first bool, run func() (float64, cores, error), into *[]round) error {
		if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			return err
		}
		if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		walStart, err := resetPGStats(ctx, e, o.pgStats && first)
		if err != nil {
			return err
		}
		rate, cpu, err := run()
		if err != nil {
			return err
		}
		if into != nil {
			*into = append(*into, round{rate, cpu})
		}
		return writePGStats(ctx, e, o.pgStats && first, walStart, name, o.jobs, &report)
	}
	// Round -1 warms each side up and is not counted: the first round of
	// either side opens connections and prepares its statements on each,
	// which a service running for a while has done long before.
	for i := -1; i < o.rounds; i++ {
		oursTo, riverTo := &ours, &river
		if i < 0 {
			oursTo, riverTo = nil, nil
		}
		// The sides take turns going first; -pgstats reports each one's
		// first counted round.
		ourTurn := func() error { return measure("runmesh", i == 0, ourRound, oursTo) }
		riverTurn := func() error {
			if o.skipRiver {
				return nil
			}
			return measure("River", i == 0, riverRound, riverTo)
		}
		turns := []func() error{ourTurn, riverTurn}
		if i%2 == 1 {
			turns[0], turns[1] = turns[1], turns[0]
		}
		for _, turn := range turns {
			if err := turn(); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "runmesh-bench lease — %s; PostgreSQL durable (fsync on); server in this process\n", machine())
	reporting := "the results of each lease answer in one POST /v1/results"
	if o.eachResult {
		reporting = "each result in a request of its own"
	}
	m := median(ours)
	fmt.Fprintf(out, "submit → lease → result, %d jobs, %d submitters (submitJobs, %d a batch), %d runners over mTLS (up to %d leases per request; %s): %.0f jobs/s\n",
		o.jobs, o.submitters, o.batch, o.runners, o.leaseMax, reporting, m.rate)
	fmt.Fprintf(out, "  median of %d rounds (%s); CPU: server and simulated runners %.2f cores, PostgreSQL %.2f cores\n",
		len(ours), rates(ours), m.cpu.self, m.cpu.postgres)
	fmt.Fprintf(out, "submit → lease with a runner already waiting (n=%d): p50 %v  p99 %v  (goals < 10ms, < 50ms: %s, %s)\n",
		len(lat), pct(lat, 50), pct(lat, 99), verdict(pct(lat, 50) < 10*time.Millisecond), verdict(pct(lat, 99) < 50*time.Millisecond))
	if o.skipRiver {
		fmt.Fprint(out, report.String())
		return nil
	}
	r := median(river)
	fmt.Fprintf(out, "River v0.51.2, same PostgreSQL, inserting (InsertMany, %d a batch) and working %d no-op jobs in process:\n", o.batch, o.jobs)
	fmt.Fprintf(out, "  MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v: %.0f jobs/s\n", o.river.workers, o.river.cooldown, o.river.poll, r.rate)
	fmt.Fprintf(out, "  median of %d rounds (%s); CPU: River and this process %.2f cores, PostgreSQL %.2f cores\n",
		len(river), rates(river), r.cpu.self, r.cpu.postgres)
	// The ratio is taken round by round, each of runmesh's rounds against
	// River's of the same turn, run right before or after it: this
	// machine's speed drifts by a quarter within an hour, and a pair
	// shares its moment where the two medians need not.
	pairs := make([]float64, len(ours))
	for i := range ours {
		pairs[i] = ours[i].rate / river[i].rate
	}
	ratio := medianBy(pairs, func(x float64) float64 { return x })
	fmt.Fprintf(out, "ratio runmesh / River: %s (goal ≥ 1: %s)\n", ratioText(ratio), verdict(ratio >= 1))
	fmt.Fprintf(out, "  median of %d rounds' ratios (%s), each round's two sides one after the other; the medians' ratio: %.2f\n",
		len(pairs), listed(pairs, func(x float64) string { return fmt.Sprintf("%.2f", x) }), m.rate/r.rate)
	fmt.Fprint(out, report.String())
	return nil
}

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
