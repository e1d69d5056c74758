package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/heartbeat"
	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/agent/internal/metrics"
	"github.com/runmesh/runmesh/agent/internal/renewal"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/worker"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/internal/sdnotify"
	"github.com/runmesh/runmesh/runnerapi"
)

// Run is the agent: it heartbeats with what it measures, renews its
// certificate, serves /metrics, checks for jobs an earlier start left, and
// once the control plane has the proof of that check it tells systemd
// READY=1 and takes work.
//
// Each value from stop asks it to stop (give it signal.Notify's channel).
// Once it is ready the first one drains it: no more work is asked for, the
// jobs it holds go on being heartbeated and reported, and Run returns once
// none is left. Any other, SIGUSR2 at any time (a restart for an upgrade),
// or the end of ctx returns at once; the jobs go on in their units and the
// next start adopts them. Stopping is success:
// Run returns an error only when the agent cannot start.
func Run(ctx context.Context, cfg Config, stop <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &daemon{cfg: cfg, log: cfg.log(), beats: newLastBeat(), health: newAgentHealth(health.NewRegistry())}
	defer d.close()
	started := make(chan error, 1)
	go func() { started <- d.start(ctx) }()

	var life lifecycle
	var drained <-chan struct{}
	var beats <-chan heartbeat.Beat
	_, changed := d.health.reg.Watch()
	d.showStatus(life.phase)
	for {
		select {
		case <-ctx.Done():
			if life.phase == starting {
				<-started
			}
			return nil
		case sig := <-stop:
			was := life.phase
			// SIGUSR2 is a restart (a package upgrade): no drain; the next
			// start, of the new binary, adopts the running jobs.
			if sig != syscall.SIGUSR2 && life.stop() == draining {
				d.drain()
				d.showStatus(life.phase)
				continue
			}
			if was == starting {
				cancel()
				<-started
				return nil
			}
			d.log.Info("exiting now; running jobs go on in their units", "signal", sig.String())
			sdnotify.Stopping()
			return nil
		case err := <-started:
			started = nil
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			life.ready()
			if !d.ready(ctx) {
				return nil
			}
			drained, beats = d.worker.Drained(), d.beats.c
		case <-drained:
			if life.drained() != stopped {
				drained = nil
				continue
			}
			sdnotify.Stopping()
			d.log.Info("drained: agent stopping")
			return nil
		case <-changed:
			_, changed = d.health.reg.Watch()
			d.showStatus(life.phase)
		case <-beats:
			// The jobs held may have changed with no condition changing.
			d.showStatus(life.phase)
		}
	}
}

// daemon is the agent's parts, wired. start fills it in; close releases
// what start opened, once start has returned.
type daemon struct {
	cfg     Config
	log     *slog.Logger
	id      *identity.Identity
	client  *runnerclient.Client
	who     runnerapi.WhoAmIResponse
	metrics *metrics.Agent
	health  *agentHealth
	// rt is nil when this host cannot run jobs; the runtime condition
	// says why.
	rt        *runtime.Local
	collector *capacity.Collector
	worker    *worker.Worker
	loop      *heartbeat.Loop
	beats     *lastBeat
	// status is the STATUS= line last sent (Run's goroutine only).
	status  string
	closers []func()
}

func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// start brings the agent up to its READY gate and waits there. It returns
// nil when the gate opened or ctx ended, an error when the agent cannot run.
func (d *daemon) start(ctx context.Context) error {
	if err := d.connect(ctx); err != nil {
		return err
	}
	if err := d.openHost(ctx); err != nil {
		return err
	}
	if err := d.wire(ctx); err != nil {
		return err
	}
	// Heartbeats from the start: they keep the leases of adopted jobs
	// alive while the survivor check runs (and runs again).
	go d.loop.Run(ctx)
	gate := readyGate{beat: d.loop.Once, recorded: d.worker.Ready, beatEvery: time.Second}
	if d.rt != nil {
		d.health.survivors.SetUnhealthy("checking for jobs from before this start")
		gate.check, gate.checkEvery = d.checkSurvivors, 15*time.Second
	} else {
		d.health.survivors.SetHealthy("nothing to check: no job runtime")
	}
	gate.wait(ctx)
	return nil
}

// connect loads the identity and asks the control plane who it is: a
// runner it does not accept does not start.
func (d *daemon) connect(ctx context.Context) error {
	var err error
	if d.id, err = identity.Load(d.cfg.dir()); err != nil {
		return err
	}
	if d.client, err = runnerclient.New(d.id); err != nil {
		return err
	}
	if d.who, err = d.client.WhoAmI(ctx); err != nil {
		return fmt.Errorf("the control plane does not accept this runner: %w", err)
	}
	d.log.Info("agent starting", "version", d.cfg.AgentVersion, "runner_id", d.who.RunnerID, "name", d.who.Name, "pool_id", d.who.PoolID,
		"certificate_serial", d.who.CertificateSerial, "certificate_not_after", d.who.CertificateNotAfter)
	return nil
}

// openHost finds what this host offers (GPUs, podman, the user's systemd
// manager) and serves /metrics.
func (d *daemon) openHost(ctx context.Context) error {
	podman := probePodman(ctx, d.cfg)
	d.collector = newCollector(d.cfg, podman.limits())
	d.closers = append(d.closers, d.collector.GPUs.Close)
	go d.collector.GPUs.WatchHealth(ctx, d.log.With("component", "gpu-health"))
	d.rt = openRuntime(ctx, d.cfg, podman, d.health.runtime)
	if d.rt != nil {
		d.closers = append(d.closers, d.rt.Close)
	}
	rt, _ := lookup(d.health.reg.Conditions(), condRuntime)
	d.log.Info("job runtime", "ok", rt.OK, "detail", rt.Text)

	d.metrics = metrics.New()
	d.metrics.CertificateExpiry(d.id.Leaf().NotAfter)
	if d.cfg.Metrics.Listen == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.Metrics.Listen)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	d.log.Info("metrics listener up", "addr", ln.Addr().String())
	go srv.Serve(ln)
	d.closers = append(d.closers, func() { srv.Close() })
	return nil
}

// wire starts renewal and joins the worker and the heartbeat loop: each
// beat reports the worker's leases and proof, and its answer goes back to
// the worker.
func (d *daemon) wire(ctx context.Context) error {
	r := &renewal.Renewer{ID: d.id, Client: d.client, Log: d.log, Renewed: func(leaf *x509.Certificate) {
		d.metrics.CertificateExpiry(leaf.NotAfter)
	}, Certificate: d.health.certificate, Renewal: d.health.renewal}
	go r.Run(ctx)

	leases := filepath.Join(d.cfg.StateDir, "leases")
	if err := ownDirs(leases); err != nil {
		return fmt.Errorf("lease records: %w", err)
	}
	var measured atomic.Pointer[runnerapi.Capacity]
	w := &worker.Worker{
		API: d.client, Kinds: d.cfg.Kinds, Version: d.cfg.AgentVersion, Log: d.log.With("component", "worker"),
		Capacity: func() (runnerapi.Capacity, bool) {
			if p := measured.Load(); p != nil {
				return *p, true
			}
			return runnerapi.Capacity{}, false
		},
	}
	if d.rt != nil {
		w.Runtime = &runtime.Runtime{System: d.rt, Conn: d.client, Dir: leases, Log: d.log.With("component", "runtime")}
		w.Sessions = d.client
	}
	d.worker = w
	d.loop = &heartbeat.Loop{
		Client: d.client, Collector: d.collector, RunnerID: d.who.RunnerID, Version: d.cfg.AgentVersion,
		Log:    d.log.With("component", "heartbeat"),
		Health: d.health.reg, Beats: d.health.heartbeat, NVML: d.health.nvml, GPUs: d.health.gpu,
		Leases:   w.Held,
		Recovery: w.Recovery,
		Images:   w.ImageStates,
		Observe: func(b heartbeat.Beat) {
			if b.Err != nil {
				d.metrics.Heartbeat("error")
			} else {
				d.metrics.Heartbeat("ok")
				// The server's faults decide which GPUs are in service,
				// from this answer on (a restarted agent learns here of
				// faults it never saw).
				d.collector.GPUs.Remember(b.Response.GPUFaults)
				c := b.Capacity
				c.GPUs = slices.Clone(c.GPUs)
				d.collector.GPUs.OutOfService(c.GPUs)
				d.metrics.SetGPUs(c, gpuHolders(w.GPUHolders()))
				measured.Store(&c)
				d.health.answered(b.Response)
				w.Answer(b.Response, b.Proof)
			}
			d.beats.put(b)
		},
	}
	w.Kick = d.loop.Kick
	// The watchdog is fed while heartbeats are attempted.
	go sdnotify.Watchdog(ctx, d.loop.Alive)
	return nil
}

// checkSurvivors is the survivor check: true once it proved the runner
// isolated.
func (d *daemon) checkSurvivors(ctx context.Context) bool {
	proof, err := d.worker.Recover(ctx, d.loop.Once)
	if err == nil && proof.Isolated {
		d.health.survivors.SetHealthy(fmt.Sprintf("isolated: %d found, %d adopted", proof.SurvivorsFound, proof.Adopted))
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	d.log.Error("survivor check failed; no work until it passes", "err", err, "isolated", proof.Isolated)
	if err == nil {
		err = errors.New("jobs still run that this agent does not follow")
	}
	d.health.survivors.SetUnhealthy(fmt.Sprintf("no work until it passes: %v", err))
	return false
}

// ready tells systemd READY=1 and starts taking work; false if ctx ended
// first.
func (d *daemon) ready(ctx context.Context) bool {
	var b heartbeat.Beat
	select {
	case b = <-d.beats.c:
	case <-ctx.Done():
		return false
	}
	d.status = statusLine(serving, len(d.worker.Held()), d.health.reg.Conditions())
	sdnotify.Ready(d.status)
	d.log.Info("agent ready", "agent_instance", d.worker.Instance(), "gpus", len(b.Capacity.GPUs), "taking_work", d.rt != nil,
		"next_heartbeat_seconds", b.Response.NextHeartbeatSeconds)
	if d.rt != nil {
		go d.worker.Run(ctx)
	}
	return true
}

// drain stops taking work; the worker's Drained says when none is left.
func (d *daemon) drain() {
	d.worker.Drain()
	d.health.stop()
	d.log.Info("draining: no more work; exiting once running jobs end (a second signal exits now)", "jobs", len(d.worker.Held()))
}

// showStatus tells systemd how the agent stands, when that changed. The
// worker is read only once start has returned (past starting).
func (d *daemon) showStatus(p phase) {
	jobs := -1
	if p != starting {
		jobs = len(d.worker.Held())
	}
	if line := statusLine(p, jobs, d.health.reg.Conditions()); line != d.status {
		d.status = line
		sdnotify.Status(line)
	}
}

// gpuHolders is the worker's view of who holds which GPU, as the metrics
// label it.
func gpuHolders(in map[string]worker.GPUHolder) map[string]metrics.Holder {
	out := make(map[string]metrics.Holder, len(in))
	for uuid, h := range in {
		out[uuid] = metrics.Holder{Organisation: h.Organisation, Pool: h.Pool, Job: h.Job, Lease: h.Lease}
	}
	return out
}
