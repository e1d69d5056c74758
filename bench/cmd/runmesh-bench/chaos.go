package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/runmesh/runmesh/internal/pgcluster"
)

type chaosOptions struct {
	server  string
	runners int
	short   bool
}

// chaosLease is the pool's lease in the drills: an outage of the database
// longer than it is the case that used to cost every running job a try.
const chaosLease = 5 * time.Second

// drill is one fault the suite injects under load, and how it ends.
type drill struct {
	name string
	do   func(c *chaosRun) error
}

type chaosRun struct {
	ctx     context.Context
	o       chaosOptions
	dir     string
	cluster *pgcluster.Cluster
	f       *replicas
	sim     *chaosSim
	frozen  int // the runner the freeze drill froze
}

// benchChaos runs the drills against two real runmesh-server replicas on
// one durable PostgreSQL, under the load of simulated runners and a
// steady stream of submissions, and prints what came of every job.
func benchChaos(ctx context.Context, o chaosOptions, out io.Writer) error {
	dir, err := os.MkdirTemp("", "runmesh-chaos-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	c := &chaosRun{ctx: ctx, o: o, dir: dir, frozen: -1}
	if c.cluster, err = pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg"), LogFile: filepath.Join(dir, "pg.log"), Durable: true}); err != nil {
		return err
	}
	defer c.cluster.Stop()
	if err := c.cluster.CreateDatabase(ctx, "runmesh"); err != nil {
		return err
	}
	c.f, err = startReplicas(ctx, heartbeatOptions{server: o.server, replicas: 2}, dir, c.cluster.URL("runmesh"))
	defer func() { c.f.stop() }()
	if err != nil {
		return err
	}
	if _, err := c.f.admin.gql(ctx, `mutation($id: ID!, $s: Int) { updatePool(input: {id: $id, leaseSeconds: $s}) { id } }`,
		map[string]any{"id": c.f.poolID, "s": int(chaosLease.Seconds())}); err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.f.keys.Root)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	_, certs, err := enrolFleet(ctx, c.f.admin, c.f.poolID, "https://"+c.f.addrs[0], anon, o.runners, 4, simCapacity)
	if err != nil {
		return err
	}
	c.sim = newChaosSim(ctx, certs, roots, c.f.addrs, 300*time.Millisecond)
	// The second replica is never killed: the admin's requests go there.
	c.f.admin.url = c.f.admins[1]
	return c.drive(out)
}

func (c *chaosRun) drills() []drill {
	outage := 8 * time.Second
	if c.o.short {
		outage = 6 * time.Second
	}
	return []drill{
		{"kill -9 of a replica", (*chaosRun).killReplica},
		{"PostgreSQL restarted (fast)", func(c *chaosRun) error { return c.restartPostgres(false, 0) }},
		{"PostgreSQL restarted (immediate)", func(c *chaosRun) error { return c.restartPostgres(true, 0) }},
		{fmt.Sprintf("PostgreSQL down %v (lease %v)", outage, chaosLease), func(c *chaosRun) error { return c.restartPostgres(false, outage) }},
		{"a runner frozen past its lease", (*chaosRun).freezeRunner},
		{"forged results", func(c *chaosRun) error { c.sim.forge(0); return nil }},
	}
}

// drive runs the load and the drills in turn, then drains and checks.
func (c *chaosRun) drive(out io.Writer) error {
	load, stop := context.WithCancel(c.ctx)
	var wg sync.WaitGroup
	c.sim.start(load, &wg)
	sub := &submitter{a: c.f.admin, pool: c.f.poolID}
	wg.Go(func() { sub.run(load, 40, 250*time.Millisecond) })
	fmt.Fprintf(out, "runmesh chaos — %s; 2 runmesh-server replicas, PostgreSQL durable, %d simulated runners, lease %v\n",
		machine(), c.o.runners, chaosLease)
	fmt.Fprintf(out, "%-40s %12s\n", "drill", "resumed in")
	settle := 3 * time.Second
	time.Sleep(settle)
	worst := time.Duration(0)
	for _, d := range c.drills() {
		if err := d.do(c); err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("%s: %w", d.name, err)
		}
		after := time.Now()
		took, err := c.sim.resumed(after, 30*time.Second)
		if err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("%s: %w", d.name, err)
		}
		worst = max(worst, took)
		fmt.Fprintf(out, "%-40s %12v\n", d.name, took.Round(time.Millisecond))
		time.Sleep(settle)
	}
	sub.stopSubmitting()
	drained := c.drain(60 * time.Second)
	stop()
	wg.Wait()
	return c.report(out, sub, worst, drained)
}

func (c *chaosRun) killReplica() error {
	victim := c.f.servers[0]
	_ = victim.Process.Kill()
	_ = victim.Wait()
	c.sim.setAddrs(c.f.addrs[1:])
	time.Sleep(2 * time.Second)
	srv, addr, adminAddr, err := startServer(c.ctx, c.o.server, filepath.Join(c.dir, "replica-0-again"), filepath.Join(c.dir, "server"), c.cluster.URL("runmesh"))
	if err != nil {
		return err
	}
	c.f.servers[0], c.f.addrs[0], c.f.admins[0] = srv, addr, "http://"+adminAddr
	c.sim.setAddrs(c.f.addrs)
	return nil
}

func (c *chaosRun) restartPostgres(immediate bool, down time.Duration) error {
	var err error
	if immediate {
		err = c.cluster.Crash()
	} else {
		err = c.cluster.Halt()
	}
	if err != nil {
		return err
	}
	time.Sleep(down)
	return c.cluster.Restart(c.ctx)
}

// freezeRunner stops runner 1 (heartbeats and all) for twice the lease,
// as SIGSTOP would: its leases are taken back and run elsewhere, and what
// it reports when it thaws must not count.
func (c *chaosRun) freezeRunner() error {
	c.frozen = 1
	c.sim.freeze(1, true)
	time.Sleep(2 * chaosLease)
	c.sim.freeze(1, false)
	return nil
}

// drain waits until every submitted job has ended, and says whether they
// all did within the time.
func (c *chaosRun) drain(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		data, err := c.f.admin.gql(c.ctx, `{ q: jobs(state: QUEUED, first: 1) { nodes { id } } l: jobs(state: LEASED, first: 1) { nodes { id } } r: jobs(state: RUNNING, first: 1) { nodes { id } } }`, nil)
		if err == nil {
			var v map[string]struct{ Nodes []any }
			_ = json.Unmarshal(data, &v)
			if len(v["q"].Nodes)+len(v["l"].Nodes)+len(v["r"].Nodes) == 0 {
				return true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// report reads every submitted job back and prints the table.
func (c *chaosRun) report(out io.Writer, sub *submitter, worst time.Duration, drained bool) error {
	states, chargedJobs, err := c.outcomes(sub.ids())
	if err != nil {
		return err
	}
	charged := len(chargedJobs)
	jobs := len(sub.ids())
	succeeded := states["SUCCEEDED"]
	stuck := states["QUEUED"] + states["LEASED"] + states["RUNNING"] + states["BLOCKED"]
	lost := jobs - succeeded - stuck
	dups := c.sim.duplicates()
	fmt.Fprintf(out, "\n%8s %10s %11s %6s %6s %22s %12s\n", "jobs", "succeeded", "duplicates", "lost", "stuck", "tries charged (outage)", "worst resume")
	fmt.Fprintf(out, "%8d %10d %11d %6d %6d %22d %12v\n", jobs, succeeded, dups, lost, stuck, charged, worst.Round(time.Millisecond))
	fmt.Fprintf(out, "forged results: %d sent, %d accepted; drained: %v\n", c.sim.forged.sent, c.sim.forged.accepted, drained)
	fmt.Fprintf(out, "errors by kind (the simulated runners'): %s\n", strings.Join(c.sim.errorKinds(), ", "))
	met := dups == 0 && lost == 0 && stuck == 0 && charged == 0 && worst < 2*time.Second && c.sim.forged.accepted == 0 && drained
	fmt.Fprintf(out, "goals (0 duplicates, 0 lost, 0 stuck, 0 tries charged by an outage, 0 forged accepted, resume < 2 s): %s\n", verdict(met))
	for _, j := range chargedJobs[:min(len(chargedJobs), 3)] {
		fmt.Fprintf(out, "charged a try: job %s:", j.ID)
		for _, e := range j.Events.Nodes {
			fmt.Fprintf(out, " %s %s (attempt %d%s)", e.At.Format("15:04:05.000"), e.Type, e.Attempt, strings.TrimSuffix(", "+e.Detail, ", "))
		}
		fmt.Fprintln(out)
	}
	if !met {
		return fmt.Errorf("chaos: goals not met")
	}
	return nil
}

// chaosJob is a job as read back, with its events.
type chaosJob struct {
	ID     string
	State  string
	Events struct {
		Nodes []struct {
			At      time.Time
			Type    string
			Attempt int
			Detail  string
		}
	}
}

// outcomes reads the jobs back through GraphQL, a hundred a query, and
// counts them by state, and returns those that lost a try to an expired
// lease without being the frozen runner's (an outage's doing).
func (c *chaosRun) outcomes(ids []string) (map[string]int, []chaosJob, error) {
	states := map[string]int{}
	var charged []chaosJob
	frozenLeases := c.sim.leasesOf(c.frozen)
	for i := 0; i < len(ids); i += 100 {
		var q strings.Builder
		q.WriteString("{ ")
		for k, id := range ids[i:min(i+100, len(ids))] {
			fmt.Fprintf(&q, "j%d: job(id: %q) { id state events { nodes { at type attempt detail } } } ", k, id)
		}
		q.WriteString("}")
		data, err := c.f.admin.gql(c.ctx, q.String(), nil)
		if err != nil {
			return nil, nil, err
		}
		var got map[string]chaosJob
		if err := json.Unmarshal(data, &got); err != nil {
			return nil, nil, err
		}
		for _, j := range got {
			states[j.State]++
			for _, e := range j.Events.Nodes {
				if e.Type == "LEASE_EXPIRED" && !frozenLeases[j.ID] {
					charged = append(charged, j)
					break
				}
			}
		}
	}
	return states, charged, nil
}
