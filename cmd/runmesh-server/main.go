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

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/controlplane/config"
	"github.com/runmesh/runmesh/controlplane/objects"
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
	return controlplane.Run(ctx, cfg, newLogger(stderr, cfg.Log.Level))
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig("migrate", args, stderr)
	if err != nil {
		return err
	}
	pool, err := controlplane.OpenDatabase(ctx, cfg)
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
		keys, created, err := ca.Init(controlplane.CADir(*stateDir), "runmesh")
		if err != nil {
			return err
		}
		if !created {
			fmt.Fprintf(stderr, "a CA already exists in %s; leaving it as it is\n", controlplane.CADir(*stateDir))
		}
		fmt.Fprintln(stdout, keys.Fingerprint())
		return nil
	case "fingerprint":
		keys, err := ca.Load(controlplane.CADir(*stateDir))
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
	pool, err := controlplane.OpenCurrentDatabase(ctx, cfg)
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
