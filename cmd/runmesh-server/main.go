// Command runmesh-server is the runmesh control plane.
//
//	runmesh-server serve --config FILE      production
//	runmesh-server migrate --config FILE    upgrade the database schema
//	runmesh-server ca init|fingerprint      the CA under --state-dir
//	runmesh-server dev [--state-dir DIR]    the embedded default, with a private PostgreSQL
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/config"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/sdnotify"
	"github.com/runmesh/runmesh/pki/ca"
)

const usage = `usage: runmesh-server COMMAND [flags]

commands:
  serve --config FILE    run the control plane
  migrate --config FILE  apply database migrations, then exit
  bootstrap-admin --config FILE [--name NAME]
                         create a platform admin and print its token (once);
                         refused when any admin exists already
  ca init [--state-dir DIR]
                         create the root and intermediate CA (serve does it on first start)
  ca fingerprint [--state-dir DIR]
                         print the root's fingerprint, which runners pin
  dev [--state-dir DIR] [--admin-addr ADDR] [--runner-addr ADDR]
                         run on an embedded default: a private PostgreSQL in DIR,
                         the admin API on loopback, a platform-admin token on first run
  version                print the version
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "runmesh-server:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest, stderr)
	case "migrate":
		return migrate(ctx, rest, stdout, stderr)
	case "ca":
		return caCommand(rest, stdout, stderr)
	case "bootstrap-admin":
		return bootstrapAdmin(ctx, rest, stdout, stderr)
	case "dev":
		return dev(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, controlplane.Version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func loadConfig(name string, args []string, stderr io.Writer) (*config.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "/etc/runmesh/server.yaml", "configuration file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return config.Load(*path)
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := loadConfig("serve", args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Log.Level)
	pool, err := waitForDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	tlsCfg, err := adminTLS(cfg)
	if err != nil {
		return err
	}
	keys, created, err := ca.Init(caDir(cfg.StateDir), "runmesh")
	if err != nil {
		return err
	}
	if created {
		log.Info("created the CA", "dir", caDir(cfg.StateDir), "fingerprint", keys.Fingerprint())
	}
	var bucket *objects.Bucket
	if cfg.Storage.Enabled() {
		if bucket, err = objects.Open(cfg.Storage); err != nil {
			return err
		}
		log.Info("object storage", "origin", bucket.Origin().String(), "bucket", cfg.Storage.Bucket)
	}
	srv, err := controlplane.New(controlplane.Options{
		Bucket:             bucket,
		Pool:               pool,
		Log:                log,
		AdminAddr:          cfg.Admin.Listen,
		AdminTLS:           tlsCfg,
		Defaults:           graph.Defaults{LeaseSeconds: cfg.Pools.DefaultLeaseSeconds, QueueTimeoutHours: cfg.Pools.DefaultQueueTimeoutHours},
		JobRetention:       time.Duration(cfg.Jobs.RetentionDays) * 24 * time.Hour,
		AuditRetention:     time.Duration(cfg.Audit.RetentionDays) * 24 * time.Hour,
		CA:                 keys,
		RunnerAddr:         cfg.Runner.Listen,
		RunnerNames:        cfg.Runner.Names,
		RunnerCertLifetime: cfg.Runner.CertLifetime(),
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	sdnotify.Ready("serving")
	go srv.Health().Follow(ctx, func(summary string) { sdnotify.Status("serving; " + summary) })
	go sdnotify.Watchdog(ctx, srv.Alive)
	select {
	case <-ctx.Done():
	case err := <-srv.Done():
		return err
	}
	log.Info("shutting down")
	sdnotify.Stopping()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	return srv.Stop(stopCtx)
}

// waitForDatabase opens the database, waiting with backoff (and saying so
// in the log and STATUS=) while it cannot be reached: a replica started
// during an outage serves once it ends, instead of exiting into a restart
// loop. What waiting cannot mend (a URL that does not parse, a schema of
// another version) ends it at once.
func waitForDatabase(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	const first, most = 250 * time.Millisecond, 10 * time.Second
	for attempt, delay := 1, first; ; attempt, delay = attempt+1, min(2*delay, most) {
		pool, err := openCurrentDatabase(ctx, cfg)
		if err == nil {
			if attempt > 1 {
				log.Info("the database answers", "attempts", attempt)
			}
			return pool, nil
		}
		if !errors.Is(err, controlplane.ErrUnavailable) {
			return nil, err
		}
		log.Warn("waiting for the database", "attempt", attempt, "retry_in", delay.String(), "err", err)
		sdnotify.Status(fmt.Sprintf("waiting for the database (attempt %d): %v", attempt, err))
		sdnotify.ExtendTimeout(delay + most)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

func openDatabase(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	url, err := cfg.DatabaseURL()
	if err != nil {
		return nil, err
	}
	return controlplane.Connect(ctx, url)
}

// openCurrentDatabase opens the database and refuses it unless its schema
// is exactly the one this binary knows.
func openCurrentDatabase(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := controlplane.CheckSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig("migrate", args, stderr)
	if err != nil {
		return err
	}
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := controlplane.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema is up to date (version %d)\n", controlplane.SchemaVersion())
		return nil
	}
	fmt.Fprintf(stdout, "applied migrations %v; schema is at version %d\n", applied, controlplane.SchemaVersion())
	return nil
}

func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", defaultDevStateDir(), "where the private PostgreSQL and dev.env live (kept between runs)")
	adminAddr := fs.String("admin-addr", "127.0.0.1:8444", "admin listener (loopback only: plain HTTP)")
	runnerAddr := fs.String("runner-addr", "127.0.0.1:8443", "runner listener (TLS from the dev CA)")
	certLifetime := fs.Duration("runner-cert-lifetime", 24*time.Hour, "lifetime of runner certificates (short ones show renewal at work)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var st objects.Config
	fs.StringVar(&st.Endpoint, "storage-endpoint", "", "the jobs' S3-compatible storage (http only on loopback); none by default")
	fs.StringVar(&st.Bucket, "storage-bucket", "", "its bucket")
	fs.StringVar(&st.Region, "storage-region", "us-east-1", "its region")
	fs.StringVar(&st.CredentialsFile, "storage-credentials-file", "", "its access key, in AWS's credentials format (not readable by others)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *certLifetime < time.Minute {
		return errors.New("--runner-cert-lifetime: at least 1m")
	}
	abs, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	return controlplane.RunDev(ctx, controlplane.DevOptions{
		StateDir:   abs,
		AdminAddr:  *adminAddr,
		RunnerAddr: *runnerAddr,
		CertLife:   *certLifetime,
		Out:        stdout,
		Log:        newLogger(stderr, *logLevel),
		Storage:    st,
	})
}

// defaultDevStateDir is per user. Root's home is closed to the unprivileged
// user PostgreSQL runs as, so root's default lives under /var/lib.
func defaultDevStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/runmesh-dev"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "runmesh-dev")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".runmesh-dev"
	}
	return filepath.Join(home, ".local", "state", "runmesh-dev")
}

func caDir(stateDir string) string { return filepath.Join(stateDir, "ca") }

func caCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: runmesh-server ca init|fingerprint [--state-dir DIR]")
	}
	fs := flag.NewFlagSet("ca "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "/var/lib/runmesh-server", "the server's state directory")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "init":
		keys, created, err := ca.Init(caDir(*stateDir), "runmesh")
		if err != nil {
			return err
		}
		if !created {
			fmt.Fprintf(stderr, "a CA already exists in %s; leaving it as it is\n", caDir(*stateDir))
		}
		fmt.Fprintln(stdout, keys.Fingerprint())
		return nil
	case "fingerprint":
		keys, err := ca.Load(caDir(*stateDir))
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, keys.Fingerprint())
		return nil
	default:
		return fmt.Errorf("unknown ca command %q (init or fingerprint)", args[0])
	}
}

// bootstrapAdmin gives a fresh installation its first platform admin: the
// token goes to standard output, once, and is stored only as a hash. With
// an admin in place it refuses: further admins come from createAdminToken,
// which is audited.
func bootstrapAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bootstrap-admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "/etc/runmesh/server.yaml", "configuration file")
	name := fs.String("name", "platform-admin", "the admin's name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	pool, err := openCurrentDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	token, err := controlplane.BootstrapAdmin(ctx, pool, *name)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "platform-admin token (shown once; store it now):")
	fmt.Fprintln(stdout, token)
	return nil
}
