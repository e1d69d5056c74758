// Command runmesh-agent is the runmesh runner.
//
//	runmesh-agent enrol --server URL --ca-fingerprint HEX --token-file F|--token - [--name N]
//	runmesh-agent fingerprint      the key fingerprint an administrator compares
//	runmesh-agent status           enrolment, certificate and the server's view, as JSON
//	runmesh-agent capacity         what this runner measures, as JSON
//	runmesh-agent run              the daemon
//
// Every command takes --state-dir (default /var/lib/runmesh-agent).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/runmesh/runmesh/agent"
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
	stateDir := fs.String("state-dir", agent.DefaultStateDir, "where the key, certificates and state live")
	configFile := fs.String("config", "", "configuration file (default: built-in defaults)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	config := func() (agent.Config, error) { return loadConfig(*configFile, *stateDir, *logLevel, stderr) }
	parse := func() error { return fs.Parse(rest) }
	switch cmd {
	case "enrol", "enroll":
		return enrol(ctx, fs, rest, config, stdin, stdout)
	case "fingerprint":
		if err := parse(); err != nil {
			return err
		}
		fp, err := agent.Fingerprint(*stateDir)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, fp)
		return nil
	case "status":
		if err := parse(); err != nil {
			return err
		}
		return printJSON(stdout, agent.Status(ctx, *stateDir))
	case "capacity":
		if err := parse(); err != nil {
			return err
		}
		cfg, err := config()
		if err != nil {
			return err
		}
		c, err := agent.Capacity(ctx, cfg)
		if err != nil {
			return err
		}
		return printJSON(stdout, c)
	case "run":
		if err := parse(); err != nil {
			return err
		}
		cfg, err := config()
		if err != nil {
			return err
		}
		// The agent reads the signals itself: the first one drains it;
		// SIGUSR2 exits at once, for a restart.
		signals := make(chan os.Signal, 2)
		signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR2)
		defer signal.Stop(signals)
		stop()
		return agent.Run(context.Background(), cfg, signals)
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

func enrol(ctx context.Context, fs *flag.FlagSet, args []string, config func() (agent.Config, error), stdin io.Reader, stdout io.Writer) error {
	server := fs.String("server", "", "the runner listener, https://host:port")
	fingerprint := fs.String("ca-fingerprint", "", "hex SHA-256 of the control plane's root (runmesh-server ca fingerprint)")
	tokenFile := fs.String("token-file", "", "file holding the enrolment token")
	token := fs.String("token", "", `"-" reads the enrolment token from standard input`)
	name := fs.String("name", hostname(), "this runner's name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *server == "" || *fingerprint == "" {
		return errors.New("enrol needs --server and --ca-fingerprint")
	}
	if *token != "" && *token != "-" {
		return errors.New("tokens are never taken from the command line, where any user of this host can read them: use --token-file FILE or --token - (standard input)")
	}
	cfg, err := config()
	if err != nil {
		return err
	}
	return agent.Enrol(ctx, cfg, agent.Enrolment{
		Server: *server, CAFingerprint: *fingerprint, Name: *name, Out: stdout,
		Token: func() (string, error) { return readToken(*tokenFile, *token == "-", stdin) },
	})
}

// loadConfig reads the configuration and adds what only this binary
// knows: its version, its NVML, where its logs go.
func loadConfig(file, stateDir, logLevel string, stderr io.Writer) (agent.Config, error) {
	cfg, err := agent.LoadConfig(file, stateDir)
	if err != nil {
		return cfg, err
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(logLevel))
	cfg.Log = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: l}))
	cfg.NVML, cfg.AgentVersion = nvmlLibrary(), version
	return cfg, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
