// Command withpg runs a command against a throwaway PostgreSQL server:
//
//	go run ./internal/pgcluster/withpg -- go test ./...
//
// It starts a private cluster in a temporary directory, exports
// TEST_DATABASE_URL, runs the command, and always stops and removes the
// cluster afterwards: when the command fails, and when withpg is interrupted.
// Its exit status is the command's.
//
// When no server binaries are installed it names the Debian package to
// install; run as root with CI set, it installs that package itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/runmesh/runmesh/internal/pgcluster"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run() (int, error) {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return 2, errors.New("usage: withpg -- COMMAND [ARGS...]")
	}
	if err := ensureBinaries(); err != nil {
		return 1, err
	}

	tmp, err := os.MkdirTemp("", "runmesh-testdb-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp)
	// The server may run as another user; let it reach its data directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 1, err
	}

	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{
		DataDir: filepath.Join(tmp, "data"),
		LogFile: filepath.Join(tmp, "postgres.log"),
		Log:     log,
	})
	if err != nil {
		return 1, err
	}
	defer cluster.Stop()
	fmt.Fprintf(os.Stderr, "withpg: PostgreSQL running for this run at %s\n", cluster.URL("postgres"))

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+cluster.URL("postgres"))
	if err := cmd.Start(); err != nil {
		return 1, err
	}

	// Pass interruptions on and keep going until the command has ended, so
	// the deferred Stop always runs after it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if exit.ExitCode() < 0 {
			return 1, err
		}
		return exit.ExitCode(), nil
	default:
		return 1, err
	}
}

func ensureBinaries() error {
	_, err := pgcluster.FindBinDir()
	if err == nil || !errors.Is(err, pgcluster.ErrNoBinaries) {
		return err
	}
	if os.Geteuid() != 0 || os.Getenv("CI") == "" {
		return err
	}
	fmt.Fprintf(os.Stderr, "withpg: %v\nwithpg: CI as root: installing %s\n", err, pgcluster.DebianPackage)
	for _, argv := range [][]string{
		{"apt-get", "update", "-q"},
		{"apt-get", "install", "-y", "-q", "--no-install-recommends", pgcluster.DebianPackage},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%v: %w", argv, err)
		}
	}
	_, err = pgcluster.FindBinDir()
	return err
}
