// Command runmesh-agent is the runmesh runner.
//
//	runmesh-agent enrol --server URL --ca-fingerprint HEX --token-file F|--token - [--name N]
//	runmesh-agent fingerprint      the key fingerprint an administrator compares
//	runmesh-agent status           enrolment, certificate and the server's view, as JSON
//	runmesh-agent run              the daemon
//
// Every command takes --state-dir (default /var/lib/runmesh-agent).
package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runmesh/runmesh/agent/capacity"
	"github.com/runmesh/runmesh/agent/config"
	"github.com/runmesh/runmesh/agent/enrol"
	"github.com/runmesh/runmesh/agent/heartbeat"
	"github.com/runmesh/runmesh/agent/identity"
	"github.com/runmesh/runmesh/agent/jobrun"
	"github.com/runmesh/runmesh/agent/jobunit"
	"github.com/runmesh/runmesh/agent/metrics"
	"github.com/runmesh/runmesh/agent/renewal"
	"github.com/runmesh/runmesh/agent/runnerclient"
	"github.com/runmesh/runmesh/agent/worker"
	"github.com/runmesh/runmesh/internal/sdnotify"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// version is set at build time.
var version = "dev"

const usage = `usage: runmesh-agent COMMAND [--state-dir DIR] [flags]

commands:
  enrol --server URL --ca-fingerprint HEX (--token-file FILE | --token -) [--name NAME]
              join a pool with a single-use token and wait for approval;
              run it again to resume an interrupted enrolment
  fingerprint print this runner's key fingerprint, for the administrator to compare
  status      print the enrolment, the certificate and the server's view as JSON
  capacity    print what this runner measures (GPUs through NVML, cores, memory, disk) as JSON
  run         run the agent: heartbeats with capacity, certificate renewal, /metrics
  version     print the version
`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "runmesh-agent:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", identity.DefaultStateDir, "where the key, certificates and state live")
	configFile := fs.String("config", "", "configuration file (default: built-in defaults)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	log := func() *slog.Logger {
		var l slog.Level
		_ = l.UnmarshalText([]byte(*logLevel))
		return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: l}))
	}
	switch cmd {
	case "enrol", "enroll":
		server := fs.String("server", "", "the runner listener, https://host:port")
		fingerprint := fs.String("ca-fingerprint", "", "hex SHA-256 of the control plane's root (runmesh-server ca fingerprint)")
		tokenFile := fs.String("token-file", "", "file holding the enrolment token")
		token := fs.String("token", "", `"-" reads the enrolment token from standard input`)
		name := fs.String("name", hostname(), "this runner's name")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if *server == "" || *fingerprint == "" {
			return errors.New("enrol needs --server and --ca-fingerprint")
		}
		if *token != "" && *token != "-" {
			return errors.New("tokens are never taken from the command line, where any user of this host can read them: use --token-file FILE or --token - (standard input)")
		}
		cfg, err := config.Load(*configFile, *stateDir)
		if err != nil {
			return err
		}
		collector, closeGPUs := newCollector(cfg, probePodman(ctx, cfg).limits())
		defer closeGPUs()
		_, err = enrol.Run(ctx, enrol.Options{
			Server: *server, CAFingerprint: *fingerprint, Name: *name, Dir: identity.Dir(*stateDir),
			Out: stdout, Log: log(), Capacity: collector.Measure,
			Token: func() (string, error) { return readToken(*tokenFile, *token == "-", stdin) },
		})
		return err
	case "fingerprint":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		key, err := identity.Dir(*stateDir).LoadKey()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, pki.KeyFingerprint(key.Public().(ed25519.PublicKey)))
		return nil
	case "status":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return status(ctx, identity.Dir(*stateDir), stdout)
	case "capacity":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		cfg, err := config.Load(*configFile, *stateDir)
		if err != nil {
			return err
		}
		collector, closeGPUs := newCollector(cfg, probePodman(ctx, cfg).limits())
		defer closeGPUs()
		c, err := collector.Measure()
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	case "run":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		cfg, err := config.Load(*configFile, *stateDir)
		if err != nil {
			return err
		}
		stop() // the daemon handles its own signals: the first one drains
		return daemon(identity.Dir(*stateDir), cfg, log())
	case "version":
		fmt.Fprintln(stdout, version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "runner"
	}
	return strings.SplitN(h, ".", 2)[0]
}

// readToken reads the token from a file or standard input, one line.
func readToken(file string, fromStdin bool, stdin io.Reader) (string, error) {
	var r io.Reader
	switch {
	case file != "" && fromStdin:
		return "", errors.New("give --token-file or --token -, not both")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		defer f.Close()
		r = f
	case fromStdin:
		r = stdin
	default:
		return "", errors.New("this runner has not enrolled yet: give the enrolment token with --token-file FILE or --token -")
	}
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read token: %w", err)
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return "", errors.New("the enrolment token is empty")
	}
	return token, nil
}

type statusReport struct {
	StateDir       string      `json:"state_dir"`
	Enrolment      string      `json:"enrolment"` // none, pending, enrolled
	Server         string      `json:"server,omitempty"`
	RunnerID       string      `json:"runner_id,omitempty"`
	Name           string      `json:"name,omitempty"`
	KeyFingerprint string      `json:"key_fingerprint,omitempty"`
	Certificate    *certStatus `json:"certificate,omitempty"`
	ServerView     *serverView `json:"server_view,omitempty"`
}

type certStatus struct {
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	Expired  bool      `json:"expired"`
}

// serverView is what the control plane answers to whoami, or why it did not.
type serverView struct {
	WhoAmI any    `json:"whoami,omitempty"`
	Error  string `json:"error,omitempty"`
}

func status(ctx context.Context, dir identity.Dir, stdout io.Writer) error {
	rep := statusReport{StateDir: string(dir), Enrolment: "none"}
	if key, err := dir.LoadKey(); err == nil {
		rep.KeyFingerprint = pki.KeyFingerprint(key.Public().(ed25519.PublicKey))
	}
	if st, err := dir.LoadState(); err == nil {
		rep.Enrolment, rep.Server, rep.RunnerID, rep.Name = "pending", st.Server, st.RunnerID, st.Name
	}
	if chain, _, err := dir.LoadChain(); err == nil {
		rep.Enrolment = "enrolled"
		leaf := chain[0]
		rep.Certificate = &certStatus{leaf.SerialNumber.String(), leaf.NotAfter.UTC(), time.Now().After(leaf.NotAfter)}
		rep.ServerView = &serverView{}
		if who, err := whoami(ctx, dir); err != nil {
			rep.ServerView.Error = err.Error()
		} else {
			rep.ServerView.WhoAmI = who
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func whoami(ctx context.Context, dir identity.Dir) (any, error) {
	id, err := identity.Load(dir)
	if err != nil {
		return nil, err
	}
	c, err := runnerclient.New(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.WhoAmI(ctx)
}

// newCollector measures this host: GPUs through NVML, the rest from
// /proc and cgroups; limits, from podman, go with every report.
func newCollector(cfg config.Config, limits *runnerapi.LimitEnforcement) (*capacity.Collector, func()) {
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		cfg.WorkDir = os.TempDir()
	}
	gpus := capacity.NewGPUs(nvmlLibrary())
	return &capacity.Collector{Host: capacity.HostProbe{WorkDir: cfg.WorkDir}, GPUs: gpus, Declared: cfg.Labels, Limits: limits}, gpus.Close
}

// podmanProbe is what podman said at start-up, asked once: it decides both
// the limits the agent reports and whether it could run jobs.
type podmanProbe struct {
	path  string
	facts jobunit.PodmanFacts
	err   error
}

func probePodman(ctx context.Context, cfg config.Config) podmanProbe {
	// Every command that asks podman (run, enrol, capacity) asks it in the
	// same environment, so they report the same limits.
	userRuntimeDir()
	p := podmanProbe{path: cfg.Podman}
	if p.path == "" {
		if p.path, p.err = exec.LookPath("podman"); p.err != nil {
			p.err = errors.New("podman not found on PATH")
			return p
		}
	}
	p.facts, p.err = jobunit.ProbePodman(ctx, p.path)
	return p
}

// limits says which limits hold for job containers; whatever podman could
// not show is reported as not enforced, with the reason.
func (p podmanProbe) limits() *runnerapi.LimitEnforcement {
	if p.err != nil {
		return &runnerapi.LimitEnforcement{Reason: runnerapi.Clip(p.err.Error(), 512)}
	}
	e := jobunit.DetectEnforcement(p.facts)
	return &runnerapi.LimitEnforcement{Memory: e.Memory, CPU: e.CPU, Pids: e.Pids, Reason: runnerapi.Clip(e.Reason, 512)}
}

// openRuntime connects to the user's systemd manager when podman answers
// rootless. Without both the agent still heartbeats, and its runtime
// condition says why it takes no work.
func openRuntime(ctx context.Context, cfg config.Config, p podmanProbe) (*jobrun.Runtime, runnerapi.Condition) {
	bad := func(why string) (*jobrun.Runtime, runnerapi.Condition) {
		return nil, runnerapi.Condition{Name: "runtime", OK: false, Severity: "error", Title: runnerapi.Clip("cannot run jobs: "+why, 200)}
	}
	switch {
	case p.err != nil:
		return bad(p.err.Error())
	case !p.facts.Rootless:
		return bad("podman is not rootless for this user (run the agent as its own unprivileged user)")
	case os.Getenv("XDG_RUNTIME_DIR") == "":
		return bad("XDG_RUNTIME_DIR is not set and /run/user/UID does not exist: is lingering enabled for this user (loginctl enable-linger)?")
	}
	host := jobunit.NewHost(p.path, p.facts, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "runmesh"), filepath.Join(cfg.WorkDir, "logs"))
	rt, err := jobrun.Connect(ctx, host)
	if err != nil {
		return bad(err.Error())
	}
	return rt, runnerapi.Condition{Name: "runtime", OK: true, Severity: "info", Title: fmt.Sprintf("rootless podman (cgroup %s) in the user's systemd manager", p.facts.CgroupVersion)}
}

// userRuntimeDir points XDG_RUNTIME_DIR at the lingering user's directory
// when the service manager did not set it: podman and the user's systemd
// manager are both found through it.
func userRuntimeDir() {
	if os.Getenv("XDG_RUNTIME_DIR") != "" {
		return
	}
	dir := fmt.Sprintf("/run/user/%d", os.Getuid())
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		os.Setenv("XDG_RUNTIME_DIR", dir)
	}
}

// daemon runs the agent. The first SIGINT or SIGTERM drains it: no more
// work is asked for, running jobs go on being heartbeated and reported,
// and it exits once none is left. A second signal exits at once; the jobs
// go on in their units, and the next start adopts them.
func daemon(dir identity.Dir, cfg config.Config, log *slog.Logger) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Until the agent is up, a signal just stops it.
	up := make(chan struct{})
	go func() {
		select {
		case <-signals:
			cancel()
		case <-up:
		}
	}()

	id, err := identity.Load(dir)
	if err != nil {
		return err
	}
	c, err := runnerclient.New(id)
	if err != nil {
		return err
	}
	who, err := c.WhoAmI(ctx)
	if err != nil {
		return fmt.Errorf("the control plane does not accept this runner: %w", err)
	}
	log.Info("agent starting", "version", version, "runner_id", who.RunnerID, "name", who.Name, "pool_id", who.PoolID,
		"certificate_serial", who.CertificateSerial, "certificate_not_after", who.CertificateNotAfter)

	podman := probePodman(ctx, cfg)
	collector, closeGPUs := newCollector(cfg, podman.limits())
	defer closeGPUs()
	go collector.GPUs.WatchHealth(ctx, log.With("component", "gpu-health"))
	rt, runtimeHealth := openRuntime(ctx, cfg, podman)
	if rt != nil {
		defer rt.Close()
	}
	log.Info("job runtime", "ok", runtimeHealth.OK, "detail", runtimeHealth.Title)

	m := metrics.New()
	m.CertificateExpiry(id.Leaf().NotAfter)
	if cfg.Metrics.Listen != "off" {
		srv := &http.Server{Addr: cfg.Metrics.Listen, Handler: metricsMux(m), ReadHeaderTimeout: 10 * time.Second}
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		log.Info("metrics listener up", "addr", ln.Addr().String())
		go srv.Serve(ln)
		defer srv.Close()
	}

	r := &renewal.Renewer{ID: id, Client: c, Log: log, Renewed: func(leaf *x509.Certificate) {
		m.CertificateExpiry(leaf.NotAfter)
	}}
	go r.Run(ctx)

	var measured atomic.Pointer[runnerapi.Capacity]
	w := &worker.Worker{
		API: c, Runtime: rt, Kinds: cfg.Kinds, Dir: filepath.Join(string(dir), "leases"), Version: version,
		Log: log.With("component", "worker"),
		Capacity: func() (runnerapi.Capacity, bool) {
			if p := measured.Load(); p != nil {
				return *p, true
			}
			return runnerapi.Capacity{}, false
		},
	}
	if err := os.MkdirAll(filepath.Join(string(dir), "leases"), 0o700); err != nil {
		return err
	}
	// The latest beat, for the READY status line.
	beats := make(chan heartbeat.Beat, 1)
	loop := &heartbeat.Loop{
		Client: c, Collector: collector, RunnerID: who.RunnerID, Version: version, Log: log.With("component", "heartbeat"),
		Health: func(c runnerapi.Capacity) []runnerapi.Condition {
			return append(heartbeat.Conditions(c), runtimeHealth)
		},
		Leases:   w.Held,
		Recovery: w.Recovery,
		Observe: func(b heartbeat.Beat) {
			if b.Err != nil {
				m.Heartbeat("error")
			} else {
				m.Heartbeat("ok")
				m.SetGPUs(b.Capacity, nil)
				c := b.Capacity
				measured.Store(&c)
				w.Answer(b.Response, b.Proof)
			}
			// Replace an unread beat: READY must not show a stale one
			// (the first beat, say, sent before the survivor check).
			select {
			case <-beats:
			default:
			}
			select {
			case beats <- b:
			default:
			}
		},
	}
	w.Kick = loop.Kick
	// The watchdog is fed while heartbeats are attempted.
	go sdnotify.Watchdog(ctx, loop.Alive)

	// Heartbeats from the start: they keep the leases of adopted jobs
	// alive while the survivor check runs (and runs again).
	go loop.Run(ctx)

	// The survivor check comes before any work, and READY=1 after it: the
	// server has this start's recovery proof.
	if rt != nil {
		sdnotify.Status("checking for jobs from before this start")
		for {
			proof, err := w.Recover(ctx, loop.Once)
			if err == nil && proof.Isolated {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			log.Error("survivor check failed; no work until it passes", "err", err, "isolated", proof.Isolated)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(15 * time.Second):
			}
		}
	}
	for rt == nil || !w.Ready() {
		err := loop.Once(ctx)
		if err == nil && (rt == nil || w.Ready()) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	close(up)
	if ctx.Err() != nil {
		return nil
	}
	b := <-beats
	sdnotify.Ready(statusLine(id.Leaf(), b, 0, false))
	log.Info("agent ready", "agent_instance", w.Instance(), "gpus", len(b.Capacity.GPUs), "taking_work", rt != nil,
		"next_heartbeat_seconds", b.Response.NextHeartbeatSeconds)
	if rt != nil {
		go w.Run(ctx)
	}

	draining := false
	for {
		select {
		case <-signals:
			if draining {
				log.Info("second signal: exiting now; running jobs go on in their units")
				sdnotify.Stopping()
				return nil
			}
			draining = true
			w.Drain()
			log.Info("draining: no more work; exiting once running jobs end (a second signal exits now)", "jobs", len(w.Held()))
			sdnotify.Status(fmt.Sprintf("draining: %d jobs running", len(w.Held())))
		case <-w.Drained():
			sdnotify.Stopping()
			log.Info("drained: agent stopping")
			return nil
		case b := <-beats:
			sdnotify.Status(statusLine(id.Leaf(), b, len(w.Held()), draining))
		}
	}
}

func metricsMux(m *metrics.Agent) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return mux
}
