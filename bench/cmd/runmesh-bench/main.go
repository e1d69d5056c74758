// Command runmesh-bench measures runmesh on this machine. Each benchmark
// starts what it needs itself (a throwaway PostgreSQL from the machine's
// binaries, a real control plane on loopback) and prints its numbers.
//
//	runmesh-bench pki [-runners N] [-duration D] [-workers W]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/runnerapi"
)

const usage = `usage: runmesh-bench BENCHMARK [flags]

benchmarks:
  pki        approval → certificate-on-runner latency, and mTLS handshakes per second
  heartbeat  the most runners heartbeating every 10 s with p99 < 100 ms, and the CPU they cost
  lease      queue throughput and submit-to-lease latency, against River on the same PostgreSQL
  start      lease held → job container running, against a plain podman run (inside agent/sandbox)
  data       a job's input fetch and output upload through the agent's mover, against curl of the same
             presigned URLs of a real S3 server (versitygw on loopback)
  chaos      faults under load (a replica killed, PostgreSQL restarted and down past the lease, a runner frozen,
             results twice, forged results) against two real replicas; prints what came of every job

Every benchmark takes -o FILE to write its result to FILE as well as to stdout.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "runmesh-bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no benchmark given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var bench func(out io.Writer) error
	switch args[0] {
	case "pki":
		bench = pkiFlags(ctx, fs)
	case "heartbeat":
		bench = heartbeatFlags(ctx, fs)
	case "start":
		rounds := fs.Int("rounds", 30, "measured rounds of each")
		podman := fs.String("podman", "/usr/bin/podman", "podman binary")
		image := fs.String("image", "localhost/busybox:latest", "a local image with sleep")
		bench = func(out io.Writer) error { return benchStart(ctx, *rounds, *podman, *image, out) }
	case "lease":
		bench = leaseFlags(ctx, fs)
	case "data":
		rounds := fs.Int("rounds", 5, "measured rounds of each")
		size := fs.Int64("mib", 512, "the file's size (MiB)")
		bench = func(out io.Writer) error { return benchData(ctx, *rounds, *size, out) }
	case "chaos":
		o := chaosOptions{}
		fs.StringVar(&o.server, "server", "bin/runmesh-server", "the runmesh-server binary to run")
		fs.IntVar(&o.runners, "runners", 16, "simulated runners")
		fs.BoolVar(&o.short, "short", false, "the short form (CI's): a shorter outage")
		bench = func(out io.Writer) error { return benchChaos(ctx, o, out) }
	case "heartbeat-worker": // started by heartbeat, not by people
		file := fs.String("file", "", "")
		root := fs.String("root", "", "")
		request := fs.String("request", "", "")
		addrs := fs.String("addrs", "", "")
		interval := fs.Duration("interval", 10e9, "")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return heartbeatWorker(ctx, *file, *root, *request, *addrs, *interval, os.Stdin, stdout)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown benchmark %q", args[0])
	}
	resultFile := fs.String("o", "", "also write the result to `FILE` (for comparing builds later)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	out := stdout
	if *resultFile != "" {
		f, err := os.Create(*resultFile)
		if err != nil {
			return err
		}
		defer f.Close()
		out = io.MultiWriter(stdout, f)
	}
	return bench(out)
}

func pkiFlags(ctx context.Context, fs *flag.FlagSet) func(io.Writer) error {
	o := pkiOptions{}
	fs.IntVar(&o.runners, "runners", 50, "runners to enrol and approve, one after another")
	fs.DurationVar(&o.duration, "duration", 10e9, "how long to run handshakes")
	fs.IntVar(&o.workers, "workers", 4, "concurrent handshaking clients")
	return func(out io.Writer) error { return benchPKI(ctx, o, out) }
}

func heartbeatFlags(ctx context.Context, fs *flag.FlagSet) func(io.Writer) error {
	o := heartbeatOptions{}
	fs.StringVar(&o.server, "server", "bin/runmesh-server", "the runmesh-server binary to run")
	levels := fs.String("runners", "5000,10000,20000,25000,30000", "runner counts to step through")
	fs.IntVar(&o.replicas, "replicas", 2, "runmesh-server processes sharing the database")
	fs.IntVar(&o.workers, "workers", 2, "processes holding the simulated runners' connections")
	fs.DurationVar(&o.interval, "interval", 10e9, "heartbeat interval")
	fs.DurationVar(&o.measure, "measure", 30e9, "how long each level is measured (after one interval to settle)")
	fs.IntVar(&o.gpus, "gpus", 8, "GPUs each runner reports")
	fs.DurationVar(&o.goal, "p99", 100e6, "the p99 a level must stay under")
	return func(out io.Writer) error {
		for _, f := range strings.Split(*levels, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("-runners: %q is not a count", f)
			}
			o.levels = append(o.levels, n)
		}
		return benchHeartbeat(ctx, o, out)
	}
}

func leaseFlags(ctx context.Context, fs *flag.FlagSet) func(io.Writer) error {
	o := leaseOptions{}
	fs.IntVar(&o.jobs, "jobs", 20000, "jobs for the throughput runs (enough for a steady state: 5,000 are done in well under a second)")
	fs.IntVar(&o.runners, "runners", 8, "simulated runners")
	fs.IntVar(&o.submitters, "submitters", 8, "concurrent submitters")
	fs.IntVar(&o.batch, "batch", 1000, "jobs per submitJobs call in the throughput run, as River inserts them (1 submits them one by one)")
	fs.IntVar(&o.samples, "samples", 200, "submit-to-lease latency samples")
	fs.IntVar(&o.river.workers, "river-workers", 2000, "River's MaxWorkers (default: as River's own benchmark sets it)")
	fs.DurationVar(&o.river.cooldown, "river-cooldown", 2*time.Millisecond, "River's FetchCooldown (its default is 100ms, which caps it at 10 jobs/s per worker)")
	fs.DurationVar(&o.river.poll, "river-poll", 20*time.Millisecond, "River's FetchPollInterval")
	fs.BoolVar(&o.eachResult, "each-result", false, "runners report each result in a request of its own (default: one POST /v1/results per lease answer)")
	fs.IntVar(&o.leaseMax, "lease-max", runnerapi.MaxLeasesPerRequest, "leases each simulated runner asks for at a time (the agent asks for at most 4)")
	fs.IntVar(&o.rounds, "rounds", 7, "throughput rounds of each (runmesh's and River's taking turns); the medians are reported, and the ratio is the median of the rounds' ratios")
	fs.BoolVar(&o.skipRiver, "no-river", false, "run runmesh alone, without River and the ratio (to compare two builds)")
	fs.BoolVar(&o.isolated, "isolated", false, "instead of the throughput run, PostgreSQL's CPU per job for each step on its own: one connection, one statement at a time (-jobs a repetition, -rounds repetitions, at least 3)")
	fs.BoolVar(&o.pgStats, "pgstats", false, "load pg_stat_statements and print, for each side's first counted round, per job: the WAL, the statements run (calls and plans per 1,000 jobs) and the 20 PostgreSQL spent the most time on")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (server, runners, submitters, River) to FILE")
	memProfile := fs.String("memprofile", "", "write what this process allocated (server, runners, submitters, River; go tool pprof -sample_index=alloc_objects) to FILE")
	return func(out io.Writer) (err error) {
		if o.leaseMax < 1 || o.leaseMax > runnerapi.MaxLeasesPerRequest {
			return fmt.Errorf("-lease-max: 1 to %d", runnerapi.MaxLeasesPerRequest)
		}
		if o.rounds < 1 {
			return fmt.Errorf("-rounds: at least 1")
		}
		if o.batch < 1 || o.batch > queue.MaxBatch {
			return fmt.Errorf("-batch: 1 to %d", queue.MaxBatch)
		}
		if *memProfile != "" {
			// Sampled finer than the default (one in 512 KiB) for the
			// request path's small objects.
			runtime.MemProfileRate = 16 << 10
			defer func() {
				if werr := writeAllocs(*memProfile); err == nil && werr != nil {
					err = fmt.Errorf("-memprofile: %w", werr)
				}
			}()
		}
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		return benchLease(ctx, o, out)
	}
}

// writeAllocs writes the allocations profile to file.
func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
