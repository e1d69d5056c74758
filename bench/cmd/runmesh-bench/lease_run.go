package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

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
	roots := x509.NewCertPool()
	roots.AddCert(e.keys.Root)
	r := &leaseRun{ctx: ctx, e: e, o: o, base: "https://" + e.runnerAddr, q: e.srv.Queue(),
		// Submitters are in the server's process and submit through its
		// queue, as submitJobs does after parsing, and as River's
		// InsertMany does.
		noop: queue.Submission{PoolID: mustUUID(e.poolID), Image: "noop", Claim: record.Claim{Cores: 0.01, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"},
	}
	ids, err := r.enrol(roots)
	if err != nil {
		return err
	}
	if o.isolated {
		return benchIsolated(ctx, e, mustUUID(ids[0]), mustUUID(e.poolID), o.jobs, o.batch, max(o.rounds, 3), out)
	}
	lat, err := r.latency()
	if err != nil {
		return err
	}
	ours, river, err := r.rounds()
	if err != nil {
		return err
	}
	r.print(out, lat, ours, river)
	return nil
}

// leaseRun is one bench-lease: the control plane, its simulated runners'
// clients, and what the statement statistics reported.
type leaseRun struct {
	ctx     context.Context
	e       *benchEnv
	o       leaseOptions
	base    string // the runner listener
	q       *queue.Service
	noop    queue.Submission
	clients []*http.Client // one a simulated runner, with its certificate
	report  strings.Builder
}

// simCapacity is what every simulated runner measured.
var simCapacity = runnerapi.Capacity{Host: runnerapi.HostCapacity{Hostname: "sim", Cores: 64, MemoryMiB: 524288, MemoryAvailableMiB: 400000, DiskFreeMiB: 1 << 21}}

// enrol enrols the simulated runners as a fleet joins, and has each send
// the survivor check a fresh host's agent sends, in its first heartbeat:
// they have no jobs from before. It returns their ids.
func (r *leaseRun) enrol(roots *x509.CertPool) ([]string, error) {
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	ids, certs, err := enrolFleet(r.ctx, r.e.admin(), r.e.poolID, r.base, anon, r.o.runners, 4, simCapacity)
	if err != nil {
		return nil, err
	}
	r.clients = make([]*http.Client, len(certs))
	for i, c := range certs {
		r.clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c, nil },
		}}}
	}
	for _, c := range r.clients {
		var resp runnerapi.HeartbeatResponse
		if err := postJSON(r.ctx, c, r.base+runnerapi.PathHeartbeat, runnerapi.HeartbeatRequest{AgentVersion: "bench", Capacity: simCapacity,
			Recovery: &runnerapi.RecoveryProof{AgentInstance: simInstance, BootID: "bench", SurvivorsChecked: true, Isolated: true},
		}, &resp); err != nil {
			return nil, fmt.Errorf("first heartbeat: %w", err)
		}
		if !resp.RecoveryRecorded {
			return nil, errors.New("first heartbeat: the recovery proof was not recorded")
		}
	}
	return ids, nil
}

func (r *leaseRun) submit() error {
	_, _, err := r.q.Submit(r.ctx, record.AllOrganisations(), r.noop)
	return err
}

// submitMany is what submitJobs does, as River's InsertMany is.
func (r *leaseRun) submitMany(n int) error {
	batch := make([]queue.Submission, n)
	for i := range batch {
		batch[i] = r.noop
	}
	_, _, err := r.q.SubmitAll(r.ctx, record.AllOrganisations(), batch)
	return err
}

func (r *leaseRun) lease(c *http.Client, wait, max int) ([]runnerapi.Lease, error) {
	big := runnerapi.Resources{Cores: 1e6, MemoryMiB: 1 << 40, GPUs: 64}
	var resp runnerapi.LeaseResponse
	err := postJSON(r.ctx, c, r.base+runnerapi.PathLeases, runnerapi.LeaseRequest{Kinds: []string{"default"}, Largest: big, Free: big, Max: max, WaitSeconds: wait, AgentInstance: simInstance}, &resp)
	return resp.Leases, err
}

var zeroExit = 0

func (r *leaseRun) finish(c *http.Client, l runnerapi.Lease) error {
	var resp runnerapi.ResultResponse
	return postJSON(r.ctx, c, r.base+runnerapi.PathLeaseResult(l.LeaseID), runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zeroExit}, &resp)
}

func (r *leaseRun) finishAll(c *http.Client, ls []runnerapi.Lease) error {
	req := runnerapi.ResultsRequest{Results: make([]runnerapi.LeaseResult, len(ls))}
	for i, l := range ls {
		req.Results[i] = runnerapi.LeaseResult{LeaseID: l.LeaseID, ResultRequest: runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zeroExit}}
	}
	var resp runnerapi.ResultsResponse
	if err := postJSON(r.ctx, c, r.base+runnerapi.PathResults, req, &resp); err != nil {
		return err
	}
	for _, a := range resp.Results {
		if a.Error != nil {
			return fmt.Errorf("result for %s refused: %s", a.LeaseID, a.Error.Code)
		}
	}
	return nil
}

// latency submits one job at a time with a runner already waiting, and
// returns the times from submission to the lease on the runner, sorted.
func (r *leaseRun) latency() ([]time.Duration, error) {
	var lat []time.Duration
	for range r.o.samples {
		got := make(chan []runnerapi.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			ls, err := r.lease(r.clients[0], 30, 1)
			if err != nil {
				errc <- err
				return
			}
			got <- ls
		}()
		time.Sleep(20 * time.Millisecond) // the long-poll is waiting now
		start := time.Now()
		if err := r.submit(); err != nil {
			return nil, err
		}
		select {
		case ls := <-got:
			lat = append(lat, time.Since(start))
			for _, l := range ls {
				if err := r.finish(r.clients[0], l); err != nil {
					return nil, err
				}
			}
		case err := <-errc:
			return nil, err
		}
	}
	slices.Sort(lat)
	return lat, nil
}

func (r *leaseRun) sample() cpuUse { return cpuSample(cpuPIDs{postmaster: r.e.cluster.PID()}) }

// ourRound is one throughput round: submitters and runners at once, until
// every job is done. It returns jobs a second and the CPU it took.
func (r *leaseRun) ourRound() (float64, cores, error) {
	var submitted, done atomic.Int64
	// The clock and the CPU stop at the last accepted result: runners
	// still waiting for work after it only wait out their long-polls.
	var finished time.Time
	var cpuEnd cpuUse
	var allocsEnd goAllocs
	last := func() { finished, cpuEnd, allocsEnd = time.Now(), r.sample(), readAllocs() }
	allocs0, cpu0 := readAllocs(), r.sample()
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	fail := func(err error) { firstErr.CompareAndSwap(nil, err) }
	for range r.o.submitters {
		wg.Go(func() {
			for {
				end := submitted.Add(int64(r.o.batch))
				n := min(int64(r.o.batch), int64(r.o.jobs)-(end-int64(r.o.batch)))
				if n <= 0 {
					return
				}
				if err := r.submitMany(int(n)); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	for _, c := range r.clients {
		wg.Go(func() {
			for done.Load() < int64(r.o.jobs) && firstErr.Load() == nil {
				n, err := r.work(c)
				if err != nil {
					fail(err)
					return
				}
				if n > 0 && done.Add(int64(n)) == int64(r.o.jobs) {
					last()
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, cores{}, err
	}
	elapsed := finished.Sub(start) // wg.Wait: finished was set
	c := coresOver(cpuEnd.sub(cpu0), elapsed)
	c.allocs = allocsEnd.sub(allocs0).over(elapsed)
	return float64(r.o.jobs) / elapsed.Seconds(), c, nil
}

// work is one simulated runner's turn: a lease request and the results of
// what it leased. It returns how many jobs it finished.
func (r *leaseRun) work(c *http.Client) (int, error) {
	ls, err := r.lease(c, 1, r.o.leaseMax)
	if err != nil || len(ls) == 0 {
		return 0, err
	}
	if !r.o.eachResult {
		// No-op jobs end together: the runner reports them together, as an
		// agent whose jobs end between two reports does.
		return len(ls), r.finishAll(c, ls)
	}
	for i, l := range ls {
		if err := r.finish(c, l); err != nil {
			return i, err
		}
	}
	return len(ls), nil
}

func (r *leaseRun) riverRound() (float64, cores, error) {
	elapsed, cpu, err := benchRiver(r.ctx, r.e, r.o.jobs, r.o.batch, r.o.river, r.sample)
	if err != nil {
		return 0, cores{}, fmt.Errorf("river: %w", err)
	}
	return float64(r.o.jobs) / elapsed.Seconds(), coresOver(cpu, elapsed), nil
}

// measure runs one round of one side, starting from the same state as the
// other side's: the dead rows of the rounds before vacuumed, and a
// checkpoint behind, so that neither pays for the other's. (Both keep their
// finished jobs, as a queue in service does. Emptied tables, as River's own
// benchmark starts from, leave runmesh planning its statements for an
// empty table.) A round into nil is a warm-up, run the same way and not
// counted.
func (r *leaseRun) measure(name string, first bool, run func() (float64, cores, error), into *[]round) error {
	if _, err := r.e.pool.Exec(r.ctx, "VACUUM ANALYZE"); err != nil {
		return err
	}
	if _, err := r.e.pool.Exec(r.ctx, "CHECKPOINT"); err != nil {
		return err
	}
	walStart, err := resetPGStats(r.ctx, r.e, r.o.pgStats && first)
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
	return writePGStats(r.ctx, r.e, r.o.pgStats && first, walStart, name, r.o.jobs, &r.report)
}

// rounds runs the throughput rounds of each side, taking turns. Round -1
// warms each side up and is not counted: the first round of either side
// opens connections and prepares its statements on each, which a service
// running for a while has done long before.
func (r *leaseRun) rounds() (ours, river []round, err error) {
	if !r.o.skipRiver {
		if err := migrateRiver(r.ctx, r.e); err != nil {
			return nil, nil, fmt.Errorf("river: %w", err)
		}
	}
	for i := -1; i < r.o.rounds; i++ {
		oursTo, riverTo := &ours, &river
		if i < 0 {
			oursTo, riverTo = nil, nil
		}
		// The sides take turns going first; -pgstats reports each one's
		// first counted round.
		ourTurn := func() error { return r.measure("runmesh", i == 0, r.ourRound, oursTo) }
		riverTurn := func() error {
			if r.o.skipRiver {
				return nil
			}
			return r.measure("River", i == 0, r.riverRound, riverTo)
		}
		turns := []func() error{ourTurn, riverTurn}
		if i%2 == 1 {
			turns[0], turns[1] = turns[1], turns[0]
		}
		for _, turn := range turns {
			if err := turn(); err != nil {
				return nil, nil, err
			}
		}
	}
	return ours, river, nil
}

func (r *leaseRun) print(out io.Writer, lat []time.Duration, ours, river []round) {
	o := r.o
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
	fmt.Fprintf(out, "  CPU per job over the %d rounds: server and simulated runners %s, PostgreSQL %s; Go allocations per job: %s\n",
		len(ours), cpuPerJob(ours, false), cpuPerJob(ours, true), allocsPerJob(ours))
	fmt.Fprintf(out, "submit → lease with a runner already waiting (n=%d): p50 %v  p99 %v  (goals < 10ms, < 50ms: %s, %s)\n",
		len(lat), pct(lat, 50), pct(lat, 99), verdict(pct(lat, 50) < 10*time.Millisecond), verdict(pct(lat, 99) < 50*time.Millisecond))
	if o.skipRiver {
		fmt.Fprint(out, r.report.String())
		return
	}
	rv := median(river)
	fmt.Fprintf(out, "River v0.51.2, same PostgreSQL, inserting (InsertMany, %d a batch) and working %d no-op jobs in process:\n", o.batch, o.jobs)
	fmt.Fprintf(out, "  MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v: %.0f jobs/s\n", o.river.workers, o.river.cooldown, o.river.poll, rv.rate)
	fmt.Fprintf(out, "  median of %d rounds (%s); CPU: River and this process %.2f cores, PostgreSQL %.2f cores\n",
		len(river), rates(river), rv.cpu.self, rv.cpu.postgres)
	fmt.Fprintf(out, "  CPU per job over the %d rounds: River and this process %s, PostgreSQL %s\n", len(river), cpuPerJob(river, false), cpuPerJob(river, true))
	// The ratio is taken round by round, each of runmesh's rounds against
	// River's of the same turn, run right before or after it: the machine's
	// speed drifts within an hour, and a pair shares its moment where the
	// two medians need not.
	pairs := make([]float64, len(ours))
	for i := range ours {
		pairs[i] = ours[i].rate / river[i].rate
	}
	ratio := medianBy(pairs, func(x float64) float64 { return x })
	fmt.Fprintf(out, "ratio runmesh / River: %s (goal ≥ 1: %s)\n", ratioText(ratio), verdict(ratio >= 1))
	fmt.Fprintf(out, "  median of %d rounds' ratios (%s), each round's two sides one after the other; the medians' ratio: %.2f\n",
		len(pairs), listed(pairs, func(x float64) string { return fmt.Sprintf("%.2f", x) }), m.rate/rv.rate)
	fmt.Fprint(out, r.report.String())
}
