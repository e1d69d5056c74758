package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/devenv"
	"github.com/runmesh/runmesh/internal/pgcluster"
	"github.com/runmesh/runmesh/internal/sdnotify"
	"github.com/runmesh/runmesh/pki/ca"
)

// DevOptions configure `runmesh-server dev`.
type DevOptions struct {
	StateDir   string
	AdminAddr  string
	RunnerAddr string
	CertLife   time.Duration // runner certificate lifetime
	Out        io.Writer     // where the human-readable banner goes
	Log        *slog.Logger
	// Storage, when its endpoint is set, is the jobs' object storage.
	Storage objects.Config
}

// RunDev runs the embedded default: a private PostgreSQL in the state
// directory (kept between runs), the schema migrated, a platform admin with a
// token on first run, and the server on loopback, until ctx ends.
func RunDev(ctx context.Context, o DevOptions) error {
	runnerHost, err := prepareDev(o)
	if err != nil {
		return err
	}
	keys, _, err := ca.Init(filepath.Join(o.StateDir, "ca"), "runmesh dev")
	if err != nil {
		return err
	}
	cluster, pool, err := startDevDatabase(ctx, o)
	if cluster != nil {
		defer cluster.Stop()
	}
	if pool != nil {
		defer pool.Close()
	}
	if err != nil {
		return err
	}
	st := store.New(pool)

	envPath := filepath.Join(o.StateDir, devenv.FileName)
	token, firstRun, err := devAdminToken(ctx, st, envPath)
	if err != nil {
		return err
	}

	var bucket *objects.Bucket
	if o.Storage.Enabled() {
		if bucket, err = objects.Open(o.Storage); err != nil {
			return err
		}
	}
	srv, err := New(Options{
		Pool: pool, Store: st, Log: o.Log, AdminAddr: o.AdminAddr, Defaults: graph.DefaultDefaults,
		CA: keys, RunnerAddr: o.RunnerAddr, RunnerNames: runnerNames(runnerHost), RunnerCertLifetime: o.CertLife,
		Bucket: bucket,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	adminURL := "http://" + srv.AdminAddr().String()
	runnerURL := "https://" + srv.RunnerAddr().String()
	env := map[string]string{
		"RUNMESH_ADMIN_URL": adminURL, "RUNMESH_ADMIN_TOKEN": token,
		"RUNMESH_RUNNER_URL": runnerURL, "RUNMESH_CA_FINGERPRINT": keys.Fingerprint(),
	}
	if err := devenv.Write(envPath, env); err != nil {
		return err
	}
	printBanner(o.Out, env, envPath, firstRun)
	sdnotify.Ready("serving (dev)")
	go srv.Health().Follow(ctx, func(summary string) { sdnotify.Status("serving (dev); " + summary) })
	go sdnotify.Watchdog(ctx, srv.Alive)

	select {
	case <-ctx.Done():
	case err := <-srv.Done():
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
	case <-cluster.Exited():
		return errors.New("private postgres exited; see " + filepath.Join(o.StateDir, "postgres.log"))
	}
	sdnotify.Stopping()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Stop(stopCtx)
}

// prepareDev checks the addresses asked for and makes the state directory.
// It returns the runner listener's host.
func prepareDev(o DevOptions) (string, error) {
	if err := checkLoopback(o.AdminAddr); err != nil {
		return "", fmt.Errorf("--admin-addr: %w", err)
	}
	runnerHost, _, err := net.SplitHostPort(o.RunnerAddr)
	if err != nil {
		return "", fmt.Errorf("--runner-addr: %w", err)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	// PostgreSQL may run as another user (we may be root): it must be able
	// to pass through, but not to list, the state directory.
	if err := os.Chmod(o.StateDir, 0o711); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return runnerHost, nil
}

// startDevDatabase starts the private PostgreSQL in the state directory
// and migrates its database. The caller stops what it returns, also with
// an error.
func startDevDatabase(ctx context.Context, o DevOptions) (*pgcluster.Cluster, *pgxpool.Pool, error) {
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(o.StateDir, "postgres"),
		LogFile: filepath.Join(o.StateDir, "postgres.log"),
		Durable: true,
		Log:     o.Log.With("component", "postgres"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("private postgres: %w", err)
	}
	if err := cluster.CreateDatabase(ctx, "runmesh"); err != nil {
		return cluster, nil, err
	}
	pool, err := store.Connect(ctx, cluster.URL("runmesh"))
	if err != nil {
		return cluster, nil, fmt.Errorf("connect: %w", err)
	}
	applied, err := store.Migrate(ctx, pool)
	if err != nil {
		return cluster, pool, err
	}
	if len(applied) > 0 {
		o.Log.Info("applied migrations", "versions", applied)
	}
	return cluster, pool, nil
}

// devAdminToken creates the platform admin on first run. Later runs read
// its token back from dev.env; the database holds only its hash.
func devAdminToken(ctx context.Context, st *store.Store, envPath string) (token string, firstRun bool, err error) {
	n, err := st.CountAdmins(ctx)
	if err != nil {
		return "", false, err
	}
	if n > 0 {
		env, err := devenv.Read(envPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", false, err
		}
		return env["RUNMESH_ADMIN_TOKEN"], false, nil
	}
	token, digest := tokens.Admin.New()
	if _, err := st.CreateAdminWithToken(ctx, store.NewAdmin{
		Name: "dev-admin", Role: record.RolePlatformAdmin, TokenHash: digest,
	}); err != nil {
		return "", false, fmt.Errorf("create dev admin: %w", err)
	}
	// A platform pool to enrol into straight away.
	if _, err := st.CreatePool(ctx, record.NewPool{Name: DevPool}); err != nil {
		return "", false, fmt.Errorf("create dev pool: %w", err)
	}
	return token, true, nil
}

// DevPool is the platform pool dev creates on its first run.
const DevPool = "default"

// runnerNames are the names the dev runner listener's certificate carries.
func runnerNames(host string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if host != "" && host != "localhost" && host != "127.0.0.1" && host != "::1" {
		names = append([]string{host}, names...)
	}
	return names
}

func printBanner(w io.Writer, env map[string]string, envPath string, firstRun bool) {
	adminURL, token := env["RUNMESH_ADMIN_URL"], env["RUNMESH_ADMIN_TOKEN"]
	fmt.Fprintf(w, "runmesh dev control plane is up\n")
	fmt.Fprintf(w, "  admin API:      %s/graphql\n", adminURL)
	fmt.Fprintf(w, "  playground:     %s/playground\n", adminURL)
	fmt.Fprintf(w, "  metrics:        %s/metrics\n", adminURL)
	fmt.Fprintf(w, "  runner API:     %s\n", env["RUNMESH_RUNNER_URL"])
	fmt.Fprintf(w, "  CA fingerprint: %s\n", env["RUNMESH_CA_FINGERPRINT"])
	switch {
	case firstRun:
		fmt.Fprintf(w, "  platform-admin token (shown once; kept in %s):\n    %s\n", envPath, token)
	case token == "":
		fmt.Fprintf(w, "  platform-admin token: not in %s; create another with createAdminToken\n", envPath)
	default:
		fmt.Fprintf(w, "  platform-admin token: in %s\n", envPath)
	}
	fmt.Fprintf(w, "  for scripts: . %s\n", envPath)
	fmt.Fprintf(w, "  try: . %s && curl -s -H \"Authorization: Bearer $RUNMESH_ADMIN_TOKEN\" -H 'Content-Type: application/json' \\\n         -d '{\"query\":\"{ viewer { role } }\"}' $RUNMESH_ADMIN_URL/graphql\n", envPath)
	fmt.Fprintf(w, "  enrol an agent into the %q pool:\n", DevPool)
	fmt.Fprintf(w, "    runmesh --env-file %s create-enrolment-token --pool %s > enrol.token\n", envPath, DevPool)
	fmt.Fprintf(w, "    runmesh-agent enrol --server %s --ca-fingerprint %s --token-file enrol.token --state-dir ./agent\n",
		env["RUNMESH_RUNNER_URL"], env["RUNMESH_CA_FINGERPRINT"])
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("dev serves plain HTTP, so only on loopback (got %q)", host)
	}
	return nil
}
