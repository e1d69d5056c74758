package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
)

// isolatedSteps are the steps of a job's life that -isolated measures.
var isolatedSteps = []string{"submit", "claim", "finish"}

// benchIsolated measures what PostgreSQL itself spends on each step of a
// job's life, one statement at a time on one connection: nothing else
// competes for the CPU or the rows. The throughput rounds vary by about
// ±15 %, with the contention of many clients in them; this figure is the
// floor under their PostgreSQL share, and it moves when a statement's own
// work does. Each repetition submits batch jobs at a time and leases and
// ends them 125 at a time, as a runner of the throughput run does; the
// backend's CPU time is read from /proc around each call.
func benchIsolated(ctx context.Context, e *benchEnv, runnerID, poolID uuid.UUID, jobsPerRep, batch, reps int, out io.Writer) error {
	db, err := controlplane.Connect(ctx, e.cluster.URL("runmesh")+"&pool_max_conns=1")
	if err != nil {
		return err
	}
	defer db.Close()
	var pid int
	if err := db.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return err
	}
	q := controlplane.OpenQueue(db)
	noop := queue.Submission{PoolID: poolID, Image: "noop", Claim: record.Claim{Cores: 0.01, WallClockSeconds: 60}, MaxAttempts: 3, Kind: "default"}
	big := record.Claim{Cores: 1e6, MemoryMiB: 1 << 40, GPUs: 64}
	claim := record.ClaimRequest{RunnerID: runnerID, Kinds: []string{"default"}, Free: big, Largest: big, DefaultLeaseSeconds: 60}
	const perClaim = 125
	zero := 0
	// timed runs f and adds the backend's CPU time meanwhile to the step.
	spent := make([][]time.Duration, len(isolatedSteps))
	cpu := make([]time.Duration, len(isolatedSteps))
	timed := func(step int, f func() error) error {
		before := procCPU(pid)
		err := f()
		cpu[step] += procCPU(pid) - before
		return err
	}
	for range reps {
		clear(cpu)
		done := 0
		for done < jobsPerRep {
			n := min(batch, jobsPerRep-done)
			b := make([]queue.Submission, n)
			for i := range b {
				b[i] = noop
			}
			if err := timed(0, func() error { _, _, err := q.SubmitAll(ctx, record.AllOrganisations(), b); return err }); err != nil {
				return err
			}
			for left := n; left > 0; {
				var leased []record.Job
				if err := timed(1, func() (err error) { leased, err = q.Claim(ctx, claim, perClaim); return err }); err != nil {
					return err
				}
				if len(leased) == 0 {
					return fmt.Errorf("isolated: a claim found nothing with %d jobs queued", left)
				}
				outcomes := make([]record.Outcome, len(leased))
				for i, l := range leased {
					outcomes[i] = record.Outcome{JobID: l.ID, Attempt: l.Attempt, RunnerID: runnerID, ExitCode: &zero}
				}
				if err := timed(2, func() error {
					_, err := q.FinishAll(ctx, runnerID, outcomes)
					return err
				}); err != nil {
					return err
				}
				left -= len(leased)
			}
			done += n
		}
		for i := range isolatedSteps {
			spent[i] = append(spent[i], cpu[i]/time.Duration(jobsPerRep))
		}
	}
	fmt.Fprintf(out, "runmesh-bench lease -isolated — %s; PostgreSQL durable; one connection, one statement at a time\n", machine())
	fmt.Fprintf(out, "PostgreSQL CPU per job (median of %d repetitions of %d jobs: submitJobs %d a batch, claims and results %d at a time):\n",
		reps, jobsPerRep, batch, perClaim)
	var total time.Duration
	for i, step := range isolatedSteps {
		m := medianBy(spent[i], micros)
		total += m
		fmt.Fprintf(out, "  %-7s %5.1f µs   (%s)\n", step, micros(m), listed(spent[i], func(d time.Duration) string {
			return fmt.Sprintf("%.1f", micros(d))
		}))
	}
	fmt.Fprintf(out, "  %-7s %5.1f µs\n", "total", micros(total))
	return nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
