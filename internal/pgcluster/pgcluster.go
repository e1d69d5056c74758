// Package pgcluster runs a private PostgreSQL server from the machine's own
// binaries: for `runmesh-server dev` (data kept in its state directory) and for
// the test harness (data thrown away). The server listens only on a Unix
// socket in a directory nobody else can enter, so the socket directory's
// permissions are the access control and trust authentication is safe.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DebianPackage is what to install when no server binaries are found.
const DebianPackage = "postgresql-15"

// minMajor is the oldest server whose SQL our migrations use
// (UNIQUE NULLS NOT DISTINCT arrived in 15).
const minMajor = 15

// ErrNoBinaries says the machine has no PostgreSQL server binaries.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

// Options describe a cluster.
type Options struct {
	// DataDir holds the cluster. It is created (and initdb run) if empty.
	DataDir string
	// LogFile receives the server's own log.
	LogFile string
	// Durable=false trades crash safety for speed (tests).
	Durable bool
	// BinDir overrides discovery of initdb/postgres.
	BinDir string
	// Settings are more server settings, "name=value" each (a benchmark
	// loading pg_stat_statements, say).
	Settings []string
	Log      *slog.Logger
}

// Cluster is a running server. Stop it with Stop.
type Cluster struct {
	opts      Options
	socketDir string
	port      int
	cmd       *exec.Cmd
	exited    chan struct{}
	waitErr   error
}

// FindBinDir returns the directory of the newest installed PostgreSQL server
// that is new enough, or ErrNoBinaries with what to install.
func FindBinDir() (string, error) {
	if dir := os.Getenv("RUNMESH_PG_BINDIR"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
			return "", fmt.Errorf("RUNMESH_PG_BINDIR=%s: %w", dir, err)
		}
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	type found struct {
		major int
		dir   string
	}
	var candidates []found
	for _, m := range matches {
		dir := filepath.Dir(m)
		major, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil || major < minMajor {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			continue
		}
		candidates = append(candidates, found{major, dir})
	}
	if len(candidates) == 0 {
		return "", fmt.Errorf("%w (looked for /usr/lib/postgresql/<version>/bin, version >= %d): install the Debian package %s",
			ErrNoBinaries, minMajor, DebianPackage)
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].major > candidates[j].major })
	return candidates[0].dir, nil
}

// Start initialises the data directory if needed and starts the server,
// returning once it accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		opts.BinDir = dir
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(opts.DataDir, cred); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initdb(ctx, opts, cred); err != nil {
			return nil, err
		}
	}

	// Socket paths are limited to 107 bytes, so the socket lives in a short
	// temporary directory rather than under a possibly deep state directory.
	socketDir, err := os.MkdirTemp("", "runmesh-pg-")
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := chownTo(socketDir, cred); err != nil {
		os.RemoveAll(socketDir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(socketDir)
		return nil, err
	}
	c := &Cluster{opts: opts, socketDir: socketDir, port: port, exited: make(chan struct{})}
	if err := c.start(ctx, cred); err != nil {
		os.RemoveAll(socketDir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, cred *syscall.Credential) error {
	args := []string{
		"-D", c.opts.DataDir,
		"-k", c.socketDir,
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=",
		"-c", "unix_socket_permissions=0700",
		"-c", "max_connections=200",
	}
	for _, kv := range c.opts.Settings {
		args = append(args, "-c", kv)
	}
	if !c.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(c.opts.BinDir, "postgres"), args...)
	logf, err := openLog(c.opts.LogFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		// Its own process group: a Ctrl-C at the terminal reaches us, and we
		// stop the server in order, after whatever uses it.
		Setpgid: true,
		// If we are killed outright, do not leave a server behind.
		Pdeathsig: syscall.SIGQUIT,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd = cmd
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			c.opts.Log.Info("postgres ready", "data_dir", c.opts.DataDir, "socket_dir", c.socketDir, "port", c.port)
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during start-up (%v); its log: %s\n%s", c.waitErr, c.opts.LogFile, tail(c.opts.LogFile))
		case <-ctx.Done():
			c.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return fmt.Errorf("postgres did not accept connections within 60s: %v; its log: %s", err, c.opts.LogFile)
		}
	}
}

// URL is a connection string for database db.
func (c *Cluster) URL(db string) string {
	q := url.Values{}
	q.Set("host", c.socketDir)
	q.Set("port", strconv.Itoa(c.port))
	q.Set("user", "postgres")
	return (&url.URL{Scheme: "postgres", Path: "/" + db, RawQuery: q.Encode()}).String()
}

// CreateDatabase creates db if it does not exist.
func (c *Cluster) CreateDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", db, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

// PID is the postmaster's process id; its backends share it as their
// process group.
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// Exited is closed when the server process has ended.
func (c *Cluster) Exited() <-chan struct{} { return c.exited }

// Stop shuts the server down (fast shutdown: open sessions are ended, data
// is checkpointed) and removes the socket directory.
func (c *Cluster) Stop() error {
	defer os.RemoveAll(c.socketDir)
	return c.Halt()
}

// Halt shuts the server down as Stop does but keeps its socket directory
// and port, for Restart: clients see an outage, and the same URL works
// again once it ends.
func (c *Cluster) Halt() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	select {
	case <-c.exited:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	<-c.exited
	return errors.New("postgres did not stop within 30s; sent SIGQUIT")
}

// Crash shuts the server down at once (immediate shutdown: no checkpoint;
// it recovers from its WAL at the next start), keeping its socket and port
// for Restart.
func (c *Cluster) Crash() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	<-c.exited
	return nil
}

// Restart starts a halted server again, on the same socket and port.
func (c *Cluster) Restart(ctx context.Context) error {
	select {
	case <-c.exited:
	default:
		return errors.New("restart postgres: it is running")
	}
	cred, err := serverCredential()
	if err != nil {
		return err
	}
	c.exited, c.waitErr = make(chan struct{}), nil
	return c.start(ctx, cred)
}

func initdb(ctx context.Context, opts Options, cred *syscall.Credential) error {
	args := []string{"-D", opts.DataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !opts.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(opts.BinDir, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", opts.DataDir, err, out.String())
	}
	opts.Log.Info("initialised postgres cluster", "data_dir", opts.DataDir)
	return nil
}

// serverCredential is who runs the server. PostgreSQL refuses to run as
// root, so root hands it to the unprivileged "postgres" user (or "nobody").
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL as")
}

func prepareDataDir(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := chownTo(dir, cred); err != nil {
		return err
	}
	if cred != nil {
		if err := checkReachable(dir, cred.Uid); err != nil {
			return err
		}
	}
	return nil
}

// checkReachable reports a parent directory the server's user cannot
// enter, which would otherwise surface as a puzzling initdb error.
func checkReachable(dir string, uid uint32) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("PostgreSQL runs as uid %d, which cannot enter %s (mode %v): choose a state directory outside it", uid, p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

func openLog(path string) (*os.File, error) {
	if path == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("postgres log: %w", err)
	}
	return f, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}
