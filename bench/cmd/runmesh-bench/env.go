package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/internal/pgcluster"
	"github.com/runmesh/runmesh/pki/ca"
)

// benchEnv is a control plane on loopback over a durable, throwaway
// PostgreSQL: what a benchmark measures against.
type benchEnv struct {
	dir        string
	cluster    *pgcluster.Cluster
	pool       *pgxpool.Pool
	srv        *controlplane.Server
	keys       *ca.Keys
	adminURL   string
	runnerAddr string
	adminToken string
	poolID     string
}

// startEnv starts it; settings are more PostgreSQL settings ("name=value").
func startEnv(ctx context.Context, settings ...string) (*benchEnv, error) {
	dir, err := os.MkdirTemp("", "runmesh-bench-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	e := &benchEnv{dir: dir}
	e.cluster, err = pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(dir, "pg"), LogFile: filepath.Join(dir, "pg.log"), Durable: true, Settings: settings,
	})
	if err != nil {
		e.close()
		return nil, err
	}
	if err := e.cluster.CreateDatabase(ctx, "runmesh"); err != nil {
		e.close()
		return nil, err
	}
	if e.pool, err = controlplane.Connect(ctx, e.cluster.URL("runmesh")); err != nil {
		e.close()
		return nil, err
	}
	if _, err := controlplane.Migrate(ctx, e.pool); err != nil {
		e.close()
		return nil, err
	}
	if e.keys, _, err = ca.Init(filepath.Join(dir, "ca"), "bench"); err != nil {
		e.close()
		return nil, err
	}
	e.srv, err = controlplane.New(controlplane.Options{
		Pool: e.pool, Log: slog.New(slog.DiscardHandler),
		AdminAddr: "127.0.0.1:0", RunnerAddr: "127.0.0.1:0", CA: e.keys, RunnerNames: []string{"127.0.0.1"},
	})
	if err == nil {
		err = e.srv.Start(ctx)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	e.adminURL = "http://" + e.srv.AdminAddr().String()
	e.runnerAddr = e.srv.RunnerAddr().String()
	if e.adminToken, err = controlplane.BootstrapAdmin(ctx, e.pool, "bench"); err != nil {
		e.close()
		return nil, err
	}
	if e.poolID, err = e.admin().createPool(ctx, "bench"); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// admin is the env's admin API, as its platform admin.
func (e *benchEnv) admin() admin { return admin{url: e.adminURL, token: e.adminToken} }

func (e *benchEnv) close() {
	if e.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.srv.Stop(ctx)
		cancel()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.cluster != nil {
		e.cluster.Stop()
	}
	os.RemoveAll(e.dir)
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func machine() string {
	return fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func mustUUID(s string) uuid.UUID { return uuid.MustParse(s) }
