package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	// riverWorkers is River's MaxWorkers for the run the goal is judged by.
	riverWorkers int
	// eachResult: a request per result instead of one per lease answer.
	eachResult bool
}

// benchLease measures the queue against a real control plane and a durable
// PostgreSQL: submit → lease → result throughput with simulated runners
// over mutual TLS; submit-to-lease latency with a runner already waiting;
// and, on the same PostgreSQL, River inserting and working no-op jobs.
// simInstance is the agent instance every simulated runner leases as.
const simInstance = "00000000-0000-4000-8000-00000000beef"

func benchLease(ctx context.Context, o leaseOptions, out io.Writer) error {
	e, err := startEnv(ctx)
	if err != nil {
		return err
	}
	defer e.close()
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

	// River takes at most MaxWorkers jobs per fetch and fetches at most
	// every 100 ms (FetchCooldown), so 100 workers cap it near 1,000
	// jobs/s whatever the machine; the goal is judged against the run
	// that its own settings do not cap.
	riverCapped, err := benchRiver(ctx, e, o.jobs, 100)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	river, err := benchRiver(ctx, e, o.jobs, o.riverWorkers)
	if err != nil {
		return fmt.Errorf("river: %w", err)
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
	fmt.Fprintf(out, "River v0.51.2, same PostgreSQL, inserting (InsertMany) and working %d no-op jobs in process:\n", o.jobs)
	fmt.Fprintf(out, "  MaxWorkers 100 (capped near 1,000 jobs/s by its 100 ms fetch cooldown): %.0f jobs/s, ratio runmesh / River %.2f\n", riverCapped, ours/riverCapped)
	fmt.Fprintf(out, "  MaxWorkers %d: %.0f jobs/s\n", o.riverWorkers, river)
	fmt.Fprintf(out, "ratio runmesh / River: %.2f (goal ≥ 1: %s)\n", ours/river, verdict(ours/river >= 1))
	return nil
}

// NoopArgs is River's benchmark job.
type NoopArgs struct{}

// Kind names the job for River.
func (NoopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// benchRiver inserts n no-op jobs with InsertMany and works them with
// maxWorkers goroutines, returning jobs per second.
func benchRiver(ctx context.Context, e *benchEnv, n, maxWorkers int) (float64, error) {
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
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
		Logger:  nil,
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
		batch := min(1000, n-sent)
		params := make([]river.InsertManyParams, batch)
		for i := range params {
			params[i] = river.InsertManyParams{Args: NoopArgs{}}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, err
		}
		sent += batch
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
