// Package controlplane is the runmesh server's composition root: the one
// package of the control plane that wires the two listeners' translators
// (graph for the admin API, runnerhttp for the runner API) to the domain
// packages (tenancy, queue, fleet, enrolment, maintenance) and those to
// the store. Run is the server as `runmesh-server serve` runs it (beside
// agent.Run, the agent's); RunDev is the embedded default; Server is one
// replica's listeners and background services. It is also the one way
// into the database from outside the control plane (Connect, Migrate,
// CheckSchema, BootstrapAdmin). The admin listener serves the GraphQL API
// (/graphql, /playground), /metrics and /healthz; the runner listener
// serves the runner API and step-ca's endpoints over TLS from our own CA.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/enrolment/castore"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/maintenance"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/controlplane/runnerhttp"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// DefaultReadTimeout: the largest body either listener takes (a batch of
// results, 4 MiB; an admin request, 1 MiB) arrives well within it on any
// link a runner or an administrator works over.
const DefaultReadTimeout = 30 * time.Second

// Version is set at build time (-ldflags "-X ...controlplane.Version=...").
var Version = "dev"

// Options configure a Server.
type Options struct {
	// Pool is the database (see Connect), its schema checked.
	Pool *pgxpool.Pool
	// Store is the store over Pool (nil: one of the server's own). Tests
	// inside the control plane share theirs, so that the server's hooks
	// see what they write.
	Store *store.Store
	Log   *slog.Logger
	// AdminAddr is where the admin listener binds (":0" picks a port).
	AdminAddr string
	// AdminTLS, when set, serves the admin listener over TLS.
	AdminTLS *tls.Config
	Defaults graph.Defaults

	// Bucket is where jobs' inputs and outputs are kept (nil: no object
	// storage configured).
	Bucket *objects.Bucket

	// CA signs runner certificates and the runner listener's own.
	CA *ca.Keys
	// RunnerAddr is where the runner listener binds.
	RunnerAddr string
	// RunnerNames are the DNS names and IP addresses runners reach the
	// runner listener by; its certificate carries them.
	RunnerNames []string
	// RunnerCertLifetime is the lifetime of runner certificates (and of the
	// listener's own).
	RunnerCertLifetime time.Duration
	// RelayAddr is where the other replicas reach this one's runner
	// listener (host:port, the host one of RunnerNames) to relay sessions
	// (default: the first of RunnerNames, at the bound port).
	RelayAddr string
	// SweepInterval is the lease rescuer's pace, the one a lease past its
	// expiry waits on (default 1 s). The other maintenance services keep
	// their multiples of it (see newMaintenance).
	SweepInterval time.Duration
	// ReadTimeout bounds reading one request, body included, on both
	// listeners (0: DefaultReadTimeout).
	ReadTimeout time.Duration
	// JobRetention is how long finished jobs are kept (0:
	// maintenance.JobRetentionDefault).
	JobRetention time.Duration
	// AuditRetention is how long audit entries are kept (0:
	// maintenance.AuditRetentionDefault).
	AuditRetention time.Duration
	// Health is the process's registry of conditions; the server adds its
	// own to it (nil: a registry of its own).
	Health *health.Registry
	// HealthInterval is how often the server checks its conditions
	// unasked (0: DefaultHealthInterval).
	HealthInterval time.Duration
}

// Server is a running control plane. Start it, then Stop it.
type Server struct {
	opts       Options
	log        *slog.Logger
	metrics    *metrics
	authority  *ca.Authority
	listener   *store.Listener
	heartbeats *fleet.Writer
	upkeep     *maintenance.Maintainer
	runnerAPI  *runnerhttp.Server
	relay      *relay.Hub // people's sessions, joined with agents' streams
	replicaID  uuid.UUID  // this replica, among those advertised in the database
	relayURL   string     // where the other replicas reach this one
	cert       *serverCert
	peerCert   *serverCert // this replica's, to the other replicas
	admin      *http.Server
	runner     *http.Server
	adminLn    net.Listener
	runnerLn   net.Listener
	serving    chan error
	cancel     context.CancelFunc
	bg         sync.WaitGroup
	health     *serverHealth
	queue      *queue.Service
	enrolment  *enrolment.Service
}

// withDefaults is o with what it leaves zero filled in.
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RunnerCertLifetime == 0 {
		o.RunnerCertLifetime = enrolment.DefaultCertLifetime
	}
	if o.Defaults == (graph.Defaults{}) {
		o.Defaults = graph.DefaultDefaults
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.Store == nil {
		o.Store = store.New(o.Pool)
	}
	return o
}

// New builds a server; it binds nothing until Start.
func New(o Options) (*Server, error) {
	o = o.withDefaults()
	s := &Server{opts: o, log: o.Log.With("component", "controlplane"), metrics: newMetrics(Version, o.Store, o.Defaults.LeaseSeconds, o.Log.With("component", "metrics"))}
	s.health = newServerHealth(o.Health)
	s.upkeep = newMaintenance(o)
	auth, err := ca.NewAuthority(o.CA, castore.New(o.Store))
	if err != nil {
		return nil, err
	}
	s.authority = auth
	s.listener = store.NewListener(o.Pool, o.Log)
	enrol := enrolment.New(enrolment.Options{Store: o.Store, Listener: s.listener, Authority: auth,
		CertLifetime: o.RunnerCertLifetime, Log: o.Log})
	s.enrolment = enrol
	s.cert = listenerCert(auth, o.RunnerNames, o.RunnerCertLifetime, s.log)
	s.replicaID = uuid.New()
	s.peerCert = replicaCert(auth, s.replicaID.String(), o.RunnerCertLifetime, s.log)
	s.metrics.certificateExpiry("runner_listener", s.cert.notAfter)
	s.metrics.certificateExpiry("ca_root", func() time.Time { return o.CA.Root.NotAfter })
	s.metrics.certificateExpiry("ca_intermediate", func() time.Time { return o.CA.Intermediate.NotAfter })

	s.queue = queue.NewService(o.Store, s.listener)
	s.queue.HasStorage = o.Bucket != nil
	ten := tenancy.New(o.Store, s.listener)
	mux := http.NewServeMux()
	mux.Handle("/graphql", s.metrics.instrument("admin", "/graphql", graph.NewHandler(graph.Options{
		Tenancy:       ten,
		Queue:         s.queue,
		Fleet:         fleet.NewService(o.Store, s.listener),
		Enrolment:     enrol,
		Log:           o.Log.With("component", "graphql"),
		Defaults:      o.Defaults,
		CAFingerprint: o.CA.Fingerprint(),
		Health:        s.health.reg,
		Version:       Version,
		Storage:       o.Bucket,
	})))
	playground := graph.PlaygroundHandler("/graphql") // the page, and its files under /playground/
	mux.Handle("GET /playground", playground)
	mux.Handle("GET /playground/", playground)
	s.relay = relay.NewHub(relay.DefaultBounds)
	s.relay.Elsewhere = &relay.Peers{
		List: func(ctx context.Context) ([]string, error) {
			return o.Store.PeerReplicas(ctx, s.replicaID, replicaFresh)
		},
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: auth.Roots(), GetClientCertificate: s.peerCert.getClient},
	}
	mux.Handle("GET "+runnerapi.PathSessions+"{jobId}", graph.NewSessionHandler(graph.SessionOptions{
		Tenancy: ten, Queue: s.queue, Relay: s.relay, Log: o.Log.With("component", "sessions"),
	}))
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /healthz", s.healthz)
	s.admin = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// The whole request, as on the runner listener (a websocket's
		// upgrade is hijacked, and the deadline cleared with it).
		ReadTimeout: o.ReadTimeout,
		IdleTimeout: 2 * time.Minute,
		TLSConfig:   o.AdminTLS,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}

	s.heartbeats = fleet.NewWriter(o.Store, o.Log.With("component", "heartbeats"), fleet.WriterOptions{BatchSize: s.metrics.heartbeatBatch})
	s.runnerAPI = runnerhttp.New(runnerhttp.Options{
		Enrolment: enrol,
		Heartbeats: fleet.NewHeartbeats(o.Store, s.heartbeats, fleet.HeartbeatsOptions{
			DefaultLeaseSeconds: o.Defaults.LeaseSeconds, Latency: s.metrics.heartbeatLatency, Log: o.Log}),
		Leases:  s.queue.Leases(queue.LeasesOptions{Bucket: o.Bucket, DefaultLeaseSeconds: o.Defaults.LeaseSeconds, Log: o.Log}),
		Relay:   s.relay,
		Log:     o.Log,
		Version: "runmesh " + Version,
	})
	// This replica's identity cache forgets as soon as a runner change it
	// made commits; other replicas' caches forget on the NOTIFY.
	o.Store.OnRunnerChange(enrol.Heard)
	s.runner = &http.Server{
		Handler:           s.metrics.instrument("runner", "", s.runnerAPI.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		// A whole request, body included: every body of the runner API is
		// bounded and small, and a peer trickling one must not hold a
		// connection (the answers to long polls are not bounded by it).
		ReadTimeout: o.ReadTimeout,
		IdleTimeout: 2 * time.Minute,
		TLSConfig:   s.runnerAPI.TLSConfig(s.cert.get),
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Start binds the listeners and begins serving. When it returns nil the
// server accepts connections and listens for notifications.
func (s *Server) Start(ctx context.Context) error {
	bg, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s.cancel = func() { cancel(queue.ErrStopping) }
	if err := s.cert.issue(ctx); err != nil {
		return err
	}
	if err := s.peerCert.issue(ctx); err != nil {
		return err
	}
	if err := s.upkeep.Start(bg); err != nil {
		return err
	}
	s.goBackground(func() { s.listener.Run(bg) })
	s.goBackground(func() { s.cert.renew(bg) })
	s.goBackground(func() { s.peerCert.renew(bg) })
	s.goBackground(func() { s.heartbeats.Run(bg) })
	s.goBackground(func() { s.enrolment.Watch(bg) })
	select {
	case <-s.listener.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}

	lc := &net.ListenConfig{}
	adminLn, err := lc.Listen(ctx, "tcp", s.opts.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	runnerLn, err := lc.Listen(ctx, "tcp", s.opts.RunnerAddr)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("runner listener: %w", err)
	}
	s.adminLn, s.runnerLn = adminLn, runnerLn
	s.relayURL = "https://" + s.opts.RelayAddr
	if s.opts.RelayAddr == "" {
		s.relayURL = "https://" + net.JoinHostPort(s.opts.RunnerNames[0], strconv.Itoa(runnerLn.Addr().(*net.TCPAddr).Port))
	}
	if err := s.opts.Store.AdvertiseReplica(ctx, s.replicaID, s.relayURL); err != nil {
		adminLn.Close()
		runnerLn.Close()
		return fmt.Errorf("advertise this replica: %w", err)
	}
	s.goBackground(func() { s.advertise(bg) })
	// Requests live inside the background context, so Stop ends the
	// enrolment long-polls instead of waiting them out.
	s.runner.BaseContext = func(net.Listener) context.Context { return bg }
	s.serving = make(chan error, 2)
	serve := func(srv *http.Server, ln net.Listener, useTLS bool) {
		var err error
		if useTLS {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.listenerStopped(srv, err)
		s.serving <- err
	}
	s.listening()
	go serve(s.admin, adminLn, s.opts.AdminTLS != nil)
	go serve(s.runner, runnerLn, true)
	s.goBackground(func() { s.watchHealth(bg) })
	s.log.Info("admin listener up", "addr", adminLn.Addr().String(), "tls", s.opts.AdminTLS != nil)
	s.log.Info("runner listener up", "addr", runnerLn.Addr().String(), "ca_fingerprint", s.opts.CA.Fingerprint())
	s.log.Info("replica advertised", "replica", s.replicaID, "relay_url", s.relayURL)
	return nil
}

// Replicas advertise themselves every replicaBeat; one not seen within
// replicaFresh is not asked for streams, and its row goes after
// replicaKeep.
const (
	replicaBeat  = 5 * time.Second
	replicaFresh = 3 * replicaBeat
	replicaKeep  = time.Hour
)

// advertise keeps this replica's row fresh until ctx ends, and prunes the
// rows of replicas long gone; then it deletes its own.
func (s *Server) advertise(ctx context.Context) {
	tick := time.NewTicker(replicaBeat)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := s.opts.Store.ForgetReplica(dctx, s.replicaID); err != nil {
				s.log.Warn("forget this replica", "err", err)
			}
			return
		case <-tick.C:
		}
		if err := s.opts.Store.AdvertiseReplica(ctx, s.replicaID, s.relayURL); err != nil && ctx.Err() == nil {
			s.log.Warn("advertise this replica", "err", err)
		}
		if n%720 == 0 {
			if _, err := s.opts.Store.PruneReplicas(ctx, replicaKeep); err != nil && ctx.Err() == nil {
				s.log.Warn("prune replicas", "err", err)
			}
		}
	}
}

func (s *Server) goBackground(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// AdminAddr is the bound admin address.
func (s *Server) AdminAddr() net.Addr { return s.adminLn.Addr() }

// RunnerAddr is the bound runner address.
func (s *Server) RunnerAddr() net.Addr { return s.runnerLn.Addr() }

// Queue is the server's queue: what submitJobs submits through, for a
// caller in the same process (the benchmark's submitters).
func (s *Server) Queue() *queue.Service { return s.queue }

// Authority is the embedded CA.
func (s *Server) Authority() *ca.Authority { return s.authority }

// Done reports a listener that stopped serving on its own.
func (s *Server) Done() <-chan error { return s.serving }

// Stop stops accepting, lets requests in flight finish until ctx ends, then
// closes what is left.
func (s *Server) Stop(ctx context.Context) error {
	// Long-polls hold requests open; they end with the background context.
	s.cancel()
	err := errors.Join(s.admin.Shutdown(ctx), s.runner.Shutdown(ctx))
	if err != nil {
		s.admin.Close()
		s.runner.Close()
	}
	s.upkeep.Stop()
	s.bg.Wait()
	return err
}

// Multiples of SweepInterval, the lease rescuer's pace, for the services
// whose rules work in minutes and hours: at the default, the blocked check
// and the pruners every 10 s, queue timeouts every minute. One knob turns
// them all down together, as tests do.
const (
	blockedCheckEvery  = 10
	queueTimeoutsEvery = 60
	pruneEvery         = 10
)

// newMaintenance builds the background services every replica runs.
func newMaintenance(o Options) *maintenance.Maintainer {
	every := o.SweepInterval
	return maintenance.NewMaintainer(
		maintenance.NewLeaseRescuer(o.Store, maintenance.LeaseRescuerConfig{Interval: every, Log: o.Log}),
		maintenance.NewBlockedCheck(o.Store, maintenance.BlockedCheckConfig{Interval: blockedCheckEvery * every, Log: o.Log}),
		maintenance.NewQueueTimeouts(o.Store, maintenance.QueueTimeoutsConfig{Interval: queueTimeoutsEvery * every,
			DefaultQueueTimeoutHours: o.Defaults.QueueTimeoutHours, Log: o.Log}),
		maintenance.NewJobPruner(o.Store, maintenance.PrunerConfig{Interval: pruneEvery * every, Retention: o.JobRetention, Log: o.Log}),
		maintenance.NewCertificatePruner(o.Store, maintenance.PrunerConfig{Interval: pruneEvery * every, Log: o.Log}),
		maintenance.NewAuditPruner(o.Store, maintenance.PrunerConfig{Interval: pruneEvery * every, Retention: o.AuditRetention, Log: o.Log}),
	)
}
