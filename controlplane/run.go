package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/config"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/sdnotify"
	"github.com/runmesh/runmesh/pki/ca"
)

// stopGrace is how long a stopping server lets requests in flight finish.
const stopGrace = 20 * time.Second

// Run is the server as `runmesh-server serve` runs it, with cfg, until ctx
// ends (a cancellation is success): it waits for the database (a replica
// started during an outage serves once it ends), refuses a schema of
// another version, creates the CA under the state directory on the first
// start, opens the object storage when one is configured, serves, and
// tells systemd (READY, STATUS with the health summary, the watchdog,
// STOPPING).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	pool, err := waitForDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	admin, err := adminTLS(cfg)
	if err != nil {
		return err
	}
	keys, created, err := ca.Init(CADir(cfg.StateDir), "runmesh")
	if err != nil {
		return err
	}
	if created {
		log.Info("created the CA", "dir", CADir(cfg.StateDir), "fingerprint", keys.Fingerprint())
	}
	var bucket *objects.Bucket
	if cfg.Storage.Enabled() {
		if bucket, err = objects.Open(cfg.Storage); err != nil {
			return err
		}
		log.Info("object storage", "origin", bucket.Origin().String(), "bucket", cfg.Storage.Bucket)
	}
	srv, err := New(Options{
		Bucket:             bucket,
		Pool:               pool,
		Log:                log,
		AdminAddr:          cfg.Admin.Listen,
		AdminTLS:           admin,
		Defaults:           graph.Defaults{LeaseSeconds: cfg.Pools.DefaultLeaseSeconds, QueueTimeoutHours: cfg.Pools.DefaultQueueTimeoutHours},
		JobRetention:       time.Duration(cfg.Jobs.RetentionDays) * 24 * time.Hour,
		AuditRetention:     time.Duration(cfg.Audit.RetentionDays) * 24 * time.Hour,
		CA:                 keys,
		RunnerAddr:         cfg.Runner.Listen,
		RunnerNames:        cfg.Runner.Names,
		RelayAddr:          cfg.Runner.Advertise,
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
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
	defer cancel()
	return srv.Stop(stopCtx)
}

// CADir is where the CA's keys live under a server's state directory.
func CADir(stateDir string) string { return filepath.Join(stateDir, "ca") }

// waitForDatabase opens the database, waiting with backoff (and saying so
// in the log and STATUS=) while it cannot be reached. What waiting cannot
// mend (a URL that does not parse, a schema of another version) ends it
// at once.
func waitForDatabase(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	const first, most = 250 * time.Millisecond, 10 * time.Second
	for attempt, delay := 1, first; ; attempt, delay = attempt+1, min(2*delay, most) {
		pool, err := OpenCurrentDatabase(ctx, cfg)
		if err == nil {
			if attempt > 1 {
				log.Info("the database answers", "attempts", attempt)
			}
			return pool, nil
		}
		if !errors.Is(err, ErrUnavailable) {
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

// OpenDatabase opens the database cfg names, without checking its schema
// (migrate's way in).
func OpenDatabase(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	url, err := cfg.DatabaseURL()
	if err != nil {
		return nil, err
	}
	return Connect(ctx, url)
}

// OpenCurrentDatabase opens the database cfg names and refuses it unless
// its schema is exactly the one this binary knows.
func OpenCurrentDatabase(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pool, err := OpenDatabase(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := CheckSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// adminTLS is the admin listener's TLS as cfg sets it (nil: plain HTTP).
func adminTLS(cfg *config.Config) (*tls.Config, error) {
	if cfg.Admin.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.Admin.TLSCertFile, cfg.Admin.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("admin TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
