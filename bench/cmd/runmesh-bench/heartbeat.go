package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runmesh/runmesh/internal/pgcluster"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

type heartbeatOptions struct {
	server   string // runmesh-server binary
	levels   []int
	interval time.Duration
	measure  time.Duration
	gpus     int
	goal     time.Duration
	replicas int // runmesh-server processes sharing the database
	workers  int // processes holding the simulated runners' connections
}

// benchHeartbeat runs runmesh-server replicas as processes of their own
// against one durable PostgreSQL, and simulated runners in worker
// processes: each runner has its own key and certificate, keeps its own
// mutual-TLS connection to one replica, and heartbeats every interval
// (±10%) with a report of gpus GPUs. It raises the number of runners level
// by level and reports heartbeat latency (request written → answer read,
// the report durable) and the CPU each part used.
func benchHeartbeat(ctx context.Context, o heartbeatOptions, out io.Writer) error {
	dir, err := os.MkdirTemp("", "runmesh-bench-hb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg"), LogFile: filepath.Join(dir, "pg.log"), Durable: true})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	if err := cluster.CreateDatabase(ctx, "runmesh"); err != nil {
		return err
	}
	f, err := startReplicas(ctx, o, dir, cluster.URL("runmesh"))
	defer f.stop()
	if err != nil {
		return err
	}
	servers := f.servers

	// Every runner of the largest level, made up front and dealt out to
	// the workers.
	total := slices.Max(o.levels)
	stats := &beatStats{}
	workers, bodyLen, err := startFleet(ctx, o, dir, f, total, stats)
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "runmesh-bench heartbeat — %s; PostgreSQL durable (fsync on)\n", machine())
	fmt.Fprintf(out, "%d runmesh-server replica(s) and %d worker process(es) of simulated runners, each process under the open-file limit of %d\n",
		o.replicas, o.workers, fileLimit())
	fmt.Fprintf(out, "each runner: its own Ed25519 key and certificate, one kept-alive mTLS connection, a heartbeat every %v (±10%%) reporting %d GPUs (%d bytes)\n",
		o.interval, o.gpus, bodyLen)
	fmt.Fprintf(out, "%8s %8s %9s %9s %9s %7s %12s %12s %12s\n", "runners", "beats/s", "p50", "p99", "max", "errors", "server CPU", "postgres CPU", "clients CPU")

	pids := cpuPIDs{postmaster: cluster.PID()}
	for _, s := range servers {
		pids.servers = append(pids.servers, s.Process.Pid)
	}
	for _, w := range workers {
		pids.clients = append(pids.clients, w.cmd.Process.Pid)
	}
	var best int
	var bestP99 time.Duration
	for _, n := range o.levels {
		p99, ok, err := measureLevel(ctx, o, n, workers, pids, stats, out)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		best, bestP99 = n, p99
	}
	if best == 0 {
		fmt.Fprintf(out, "no level sustained p99 < %v\n", o.goal)
		return nil
	}
	fmt.Fprintf(out, "largest N sustained with p99 < %v: %d runners (p99 %v) — goal 20,000: %s\n", o.goal, best, bestP99, verdict(best >= 20000))
	if best == total {
		fmt.Fprintln(out, "(the largest level asked for: add levels with -runners to look further)")
	}
	return nil
}

// startFleet enrols total runners through the replicas and starts the
// worker processes that hold their connections, the runners dealt out
// among them. It returns the workers (to stop, even after an error) and
// the size of a heartbeat's body.
func startFleet(ctx context.Context, o heartbeatOptions, dir string, f *replicas, total int, stats *beatStats) ([]*workerProc, int, error) {
	var workers []*workerProc
	body, err := heartbeatBody(o.gpus)
	if err != nil {
		return workers, 0, err
	}
	request := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		runnerapi.PathHeartbeat, len(body), body)
	requestFile, rootFile := filepath.Join(dir, "request"), filepath.Join(dir, "root.pem")
	if err := os.WriteFile(requestFile, []byte(request), 0o600); err != nil {
		return workers, 0, err
	}
	if err := os.WriteFile(rootFile, pki.EncodeCertificates(f.keys.Root), 0o600); err != nil {
		return workers, 0, err
	}

	roots := x509.NewCertPool()
	roots.AddCert(f.keys.Root)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	_, certs, err := enrolFleet(ctx, f.admin, f.poolID, "https://"+f.addrs[0], anon, total, 8, benchCapacity(o.gpus))
	if err != nil {
		return workers, 0, err
	}
	runners := make([]*simRunner, total)
	for i, c := range certs {
		runners[i] = &simRunner{cert: *c}
	}
	for i := range o.workers {
		var mine []*simRunner
		for j := i; j < len(runners); j += o.workers {
			mine = append(mine, runners[j])
		}
		w, err := startWorker(ctx, filepath.Join(dir, fmt.Sprintf("worker-%d", i)), mine, rootFile, requestFile, f.addrs, o.interval, stats)
		if err != nil {
			return workers, 0, err
		}
		workers = append(workers, w)
	}

	return workers, len(body), nil
}

// replicas are the servers a heartbeat bench runs, and what it set up
// through them.
type replicas struct {
	keys    *ca.Keys
	servers []*exec.Cmd
	addrs   []string // their runner listeners
	admins  []string // their admin listeners' base URLs
	admin   admin    // the first one's
	poolID  string
}

// startReplicas starts o.replicas servers in dir on the database at dbURL.
// They share one CA (its keys in their state directory) and the database,
// migrated and given its first admin by the server's own commands; a pool
// is made for the runners through GraphQL. Call stop even after an error.
func startReplicas(ctx context.Context, o heartbeatOptions, dir, dbURL string) (*replicas, error) {
	f := &replicas{}
	stateDir := filepath.Join(dir, "server")
	var err error
	if f.keys, _, err = ca.Init(filepath.Join(stateDir, "ca"), "bench"); err != nil {
		return f, err
	}
	setupConfig, err := writeServerConfig(filepath.Join(dir, "setup"), stateDir, dbURL)
	if err != nil {
		return f, err
	}
	if _, err := serverCommand(ctx, o.server, "migrate", "--config", setupConfig); err != nil {
		return f, err
	}
	if f.admin.token, err = serverCommand(ctx, o.server, "bootstrap-admin", "--config", setupConfig); err != nil {
		return f, err
	}
	for i := range o.replicas {
		srv, addr, adminAddr, err := startServer(ctx, o.server, filepath.Join(dir, fmt.Sprintf("replica-%d", i)), stateDir, dbURL)
		if err != nil {
			return f, err
		}
		f.servers, f.addrs, f.admins = append(f.servers, srv), append(f.addrs, addr), append(f.admins, "http://"+adminAddr)
		if f.admin.url == "" {
			f.admin.url = "http://" + adminAddr
		}
	}
	f.poolID, err = f.admin.createPool(ctx, "bench")
	return f, err
}

func (f *replicas) stop() {
	for _, srv := range f.servers {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
	}
}

// measureLevel grows the workers' runners to n, lets them settle for an
// interval, measures for o.measure and prints the level's line. ok: the
// level met the goal, and the next may be tried.
func measureLevel(ctx context.Context, o heartbeatOptions, n int, workers []*workerProc, pids cpuPIDs, stats *beatStats, out io.Writer) (time.Duration, bool, error) {
	for i, w := range workers {
		share := n / o.workers
		if i < n%o.workers {
			share++
		}
		if err := w.grow(share); err != nil {
			return 0, false, err
		}
	}
	// One interval to settle, then measure.
	select {
	case <-ctx.Done():
		return 0, false, ctx.Err()
	case <-time.After(o.interval):
	}
	stats.reset()
	cpu0 := cpuSample(pids)
	select {
	case <-ctx.Done():
		return 0, false, ctx.Err()
	case <-time.After(o.measure):
	}
	cpu := cpuSample(pids).sub(cpu0)
	lat, errs := stats.take()
	if len(lat) == 0 {
		return 0, false, errors.New("no heartbeat completed")
	}
	p99 := pct(lat, 99)
	secs := o.measure.Seconds()
	fmt.Fprintf(out, "%8d %8.0f %9v %9v %9v %7d %11.2fc %11.2fc %11.2fc\n",
		n, float64(len(lat))/secs, pct(lat, 50), p99, lat[len(lat)-1].Round(10*time.Microsecond), errs,
		cpu.server.Seconds()/secs, cpu.postgres.Seconds()/secs, cpu.self.Seconds()/secs)
	return p99, p99 < o.goal && errs <= len(lat)/1000, nil
}

// writeServerConfig writes a server config for dir: loopback listeners on
// any free port, the shared state directory, the database URL in a file
// of its own (as a secret is given).
func writeServerConfig(dir, stateDir, dbURL string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	urlFile := filepath.Join(dir, "db-url")
	if err := os.WriteFile(urlFile, []byte(dbURL), 0o600); err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "server.yaml")
	return cfg, os.WriteFile(cfg, []byte(fmt.Sprintf(
		"version: 1\nstate_dir: %s\ndatabase: {url_file: %s}\nadmin: {listen: '127.0.0.1:0'}\nrunner: {listen: '127.0.0.1:0', names: ['127.0.0.1']}\n",
		stateDir, urlFile)), 0o600)
}

// serverCommand runs one of runmesh-server's commands to its end and
// returns what it printed on stdout.
func serverCommand(ctx context.Context, bin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", bin, args[0], err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// startServer starts a replica with a config of its own in dir and returns
// it with its runner and admin listeners' addresses.
func startServer(ctx context.Context, bin, dir, stateDir, dbURL string) (*exec.Cmd, string, string, error) {
	cfg, err := writeServerConfig(dir, stateDir, dbURL)
	if err != nil {
		return nil, "", "", err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg)
	logs := &lineWatcher{want: regexp.MustCompile(`"msg":"(admin|runner) listener up","component":"controlplane","addr":"([^"]+)"`), found: make(chan []string, 2)}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("start %s: %w", bin, err)
	}
	addrs := map[string]string{}
	timeout := time.After(60 * time.Second)
	for len(addrs) < 2 {
		select {
		case m := <-logs.found:
			addrs[m[1]] = m[2]
		case <-timeout:
			_ = cmd.Process.Kill()
			return nil, "", "", errors.New("runmesh-server did not come up within 60s")
		}
	}
	return cmd, addrs["runner"], addrs["admin"], nil
}

// lineWatcher passes the server's log through to nowhere, watching for one
// line.
type lineWatcher struct {
	want  *regexp.Regexp
	found chan []string // each line matched, as its submatches
	buf   bytes.Buffer
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		if m := w.want.FindStringSubmatch(line); m != nil {
			select {
			case w.found <- m:
			default: // nobody waits for more
			}
		}
	}
}

// benchCapacity is what every simulated runner measured: what it enrols
// with, and reports in each heartbeat (so no runner drifts).
func benchCapacity(gpus int) runnerapi.Capacity {
	return runnerapi.Capacity{
		Host:          runnerapi.HostCapacity{Hostname: "sim", Cores: 64, MemoryMiB: 524288, MemoryAvailableMiB: 400000, DiskFreeMiB: 1 << 21},
		DriverVersion: "550.54.15",
		Labels:        []runnerapi.Label{{Key: "runmesh.io/gpu.count", Value: strconv.Itoa(gpus), Source: runnerapi.LabelDetected}},
		GPUs:          benchGPUs(gpus),
	}
}

func heartbeatBody(gpus int) ([]byte, error) {
	return json.Marshal(runnerapi.HeartbeatRequest{AgentVersion: "bench", Capacity: benchCapacity(gpus),
		Health: []runnerapi.Condition{{Name: "nvml", OK: true, Severity: "info", Title: "ok"}}})
}

func benchGPUs(n int) []runnerapi.GPU {
	gpus := make([]runnerapi.GPU, n)
	for i := range gpus {
		gpus[i] = runnerapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i), Name: "NVIDIA H200",
			MemoryTotalMiB: 143771, MemoryUsedMiB: 70000, MemoryFreeMiB: 73771, Utilisation: 87, TemperatureC: 61, PowerWatts: 512.5, Healthy: true}
	}
	return gpus
}
