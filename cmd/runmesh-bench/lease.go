package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/runmesh/runmesh/controlplane/runnerapi"
	"github.com/runmesh/runmesh/controlplane/store"
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
	// pgStats prints, for each throughput run, the statements PostgreSQL
	// spent its time on (pg_stat_statements) and the WAL it wrote, per job.
	pgStats bool
}

// benchLease measures the queue against a real control plane and a durable
// PostgreSQL: submit → lease → result throughput with simulated runners
// over mutual TLS; submit-to-lease latency with a runner already waiting;
// and, on the same PostgreSQL, River inserting and working no-op jobs.
// simInstance is the agent instance every simulated runner leases as.
const simInstance = "00000000-0000-4000-8000-00000000beef"

func benchLease(ctx context.Context, o leaseOptions, out io.Writer) error {
	var settings []string
	if o.pgStats {
		settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}
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
	p, err := e.store.Pool(ctx, store.AllOrganisations(), mustUUID(e.poolID))
	if err != nil {
		return err
	}
	gpuJSON, inventory, capJSON := fixtureCapacity(0)
	sims, err := createRunners(ctx, e.pool, e.srv.Authority(), p.ID, o.runners, gpuJSON, inventory, capJSON)
	if err != nil {
		return err
	}
	// Simulated agents have no jobs from before: their survivor check is
	// the one a fresh host's agent sends.
	proof, _ := json.Marshal(runnerapi.RecoveryProof{AgentInstance: simInstance, BootID: "bench", SurvivorsChecked: true, Isolated: true})
	if _, err := e.pool.Exec(ctx, `UPDATE runners SET recovery = $1, recovery_at = now() WHERE pool_id = $2`, proof, p.ID); err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(e.keys.Root)
	base := "https://" + e.runnerAddr
	clients := make([]*http.Client, len(sims))
	for i, s := range sims {
		cert := s.cert
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		}}}
	}
	noop := store.NewJob{PoolID: p.ID, Image: "noop", Claim: store.Claim{Cores: 0.01, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"}
	submit := func() error {
		_, _, err := e.store.SubmitJob(ctx, store.AllOrganisations(), noop)
		return err
	}
	// Bulk submission is what submitJobs does, as River's InsertMany is.
	submitMany := func(n int) error {
		batch := make([]store.NewJob, n)
		for i := range batch {
			batch[i] = noop
		}
		_, _, err := e.store.SubmitJobs(ctx, store.AllOrganisations(), batch)
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
	sortDurations(lat)

	// Throughput: submitters and runners at once, until every job is done.
	if err := resetPGStats(ctx, e, o.pgStats); err != nil {
		return err
	}
	var submitted, done, finished atomic.Int64
	cpu0 := cpuSample(cpuPIDs{postmaster: e.cluster.PID()})
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
				ls, err := lease(c, 1, runnerapi.MaxLeasesPerRequest)
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
						finished.Store(time.Now().UnixNano())
					}
					continue
				}
				for _, l := range ls {
					if err := finish(c, l); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					if done.Add(1) == int64(o.jobs) {
						finished.Store(time.Now().UnixNano())
					}
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	// Until the last result was accepted: runners still waiting for work
	// after it only wait out their long-polls.
	elapsed := time.Unix(0, finished.Load()).Sub(start)
	ours := float64(o.jobs) / elapsed.Seconds()
	cpu := cpuSample(cpuPIDs{postmaster: e.cluster.PID()}).sub(cpu0)
	if err := writePGStats(ctx, e, o.pgStats, "runmesh", o.jobs, &report); err != nil {
		return err
	}

	if err := resetPGStats(ctx, e, o.pgStats); err != nil {
		return err
	}
	cpu0 = cpuSample(cpuPIDs{postmaster: e.cluster.PID()})
	riverStart := time.Now()
	river, err := benchRiver(ctx, e, o.jobs, o.batch, o.river)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	riverElapsed := time.Since(riverStart)
	riverCPU := cpuSample(cpuPIDs{postmaster: e.cluster.PID()}).sub(cpu0)
	if err := writePGStats(ctx, e, o.pgStats, "River", o.jobs, &report); err != nil {
		return err
	}
	fmt.Fprintf(out, "runmesh-bench lease — %s; PostgreSQL durable (fsync on); server in this process\n", machine())
	reporting := "the results of each lease answer in one POST /v1/results"
	if o.eachResult {
		reporting = "each result in a request of its own"
	}
	fmt.Fprintf(out, "submit → lease → result, %d jobs, %d submitters (submitJobs, %d a batch), %d runners over mTLS (up to %d leases per request; %s): %.0f jobs/s\n",
		o.jobs, o.submitters, o.batch, o.runners, runnerapi.MaxLeasesPerRequest, reporting, ours)
	fmt.Fprintf(out, "  CPU: server and simulated runners %.2f cores, PostgreSQL %.2f cores\n", cpu.self.Seconds()/elapsed.Seconds(), cpu.postgres.Seconds()/elapsed.Seconds())
	fmt.Fprintf(out, "submit → lease with a runner already waiting (n=%d): p50 %v  p99 %v  (goals < 10ms, < 50ms: %s, %s)\n",
		len(lat), pct(lat, 50), pct(lat, 99), verdict(pct(lat, 50) < 10*time.Millisecond), verdict(pct(lat, 99) < 50*time.Millisecond))
	fmt.Fprintf(out, "River v0.51.2, same PostgreSQL, inserting (InsertMany, %d a batch) and working %d no-op jobs in process:\n", o.batch, o.jobs)
	fmt.Fprintf(out, "  MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v: %.0f jobs/s\n", o.river.workers, o.river.cooldown, o.river.poll, river)
	fmt.Fprintf(out, "  CPU: River and this process %.2f cores, PostgreSQL %.2f cores\n", riverCPU.self.Seconds()/riverElapsed.Seconds(), riverCPU.postgres.Seconds()/riverElapsed.Seconds())
	fmt.Fprintf(out, "ratio runmesh / River: %.2f (goal ≥ 1: %s)\n", ours/river, verdict(ours/river >= 1))
	fmt.Fprint(out, report.String())
	return nil
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

// benchRiver inserts n no-op jobs with InsertMany, batch at a time, and
// works them, returning jobs per second.
func benchRiver(ctx context.Context, e *benchEnv, n, batch int, s riverSettings) (float64, error) {
	driver := riverpgxv5.New(e.pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.workers}},
		Workers:           workers,
		FetchCooldown:     s.cooldown,
		FetchPollInterval: s.poll,
	})
	if err != nil {
		return 0, err
	}
	// A channel that holds every completion: River drops events that do
	// not fit (its default holds 1,000), and the count would never end.
	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	for sent := 0; sent < n; {
		params := make([]river.InsertManyParams, min(batch, n-sent))
		for i := range params {
			params[i] = river.InsertManyParams{Args: NoopArgs{}}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, err
		}
		sent += len(params)
	}
	for got := 0; got < n; got++ {
		select {
		case <-completed:
		case <-time.After(time.Minute):
			return 0, fmt.Errorf("only %d of %d River jobs completed", got, n)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func sortDurations(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func resetPGStats(ctx context.Context, e *benchEnv, on bool) error {
	if !on {
		return nil
	}
	_, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')`)
	return err
}

// writePGStats reports what PostgreSQL did for one throughput run, per job:
// WAL records and bytes, and the statements that took the most time.
func writePGStats(ctx context.Context, e *benchEnv, on bool, name string, jobs int, w io.Writer) error {
	if !on {
		return nil
	}
	n := float64(jobs)
	var records, fpi int64
	var bytes float64
	if err := e.pool.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal`).Scan(&records, &fpi, &bytes); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s, per job: %.1f WAL records (%.2f full pages), %.0f WAL bytes\n", name, float64(records)/n, float64(fpi)/n, bytes/n)
	rows, err := e.pool.Query(ctx, `
		SELECT total_exec_time, calls, rows, shared_blks_hit + shared_blks_read + shared_blks_dirtied, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "  %9s %8s %8s %9s  %s\n", "µs/job", "calls", "rows", "blks/job", "statement")
	for rows.Next() {
		var ms float64
		var calls, nrows, blocks int64
		var query string
		if err := rows.Scan(&ms, &calls, &nrows, &blocks, &query); err != nil {
			return err
		}
		fmt.Fprintf(w, "  %9.1f %8d %8d %9.1f  %s\n", ms*1000/n, calls, nrows, float64(blocks)/n, query)
	}
	return rows.Err()
}
