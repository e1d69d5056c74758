// Package e2e drives the real runmesh binaries in tests: it builds them
// once per test binary, runs them as processes, and listens where systemd
// would for their sd_notify messages.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runmesh/runmesh/internal/devenv"
)

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Binary builds the main package pkg (an import path) once per test binary
// and returns the executable's path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	return BinaryWithTags(t, pkg, "")
}

// podmanTags are the tags anything linking podman's bindings builds with
// (the Makefile's PODMAN_TAGS).
const podmanTags = "remote,containers_image_openpgp,exclude_graphdriver_btrfs"

// BinaryWithTags is Binary built with -tags tags (and podman's).
func BinaryWithTags(t testing.TB, pkg, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := pkg + " " + tags
	if p, ok := built[key]; ok {
		return p
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "runmesh-e2e-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	if tags != "" {
		out += "-" + strings.ReplaceAll(tags, ",", "-")
	}
	all := podmanTags
	if tags != "" {
		all += "," + tags
	}
	cmd := exec.Command("go", "build", "-tags", all, "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}

// StateDir is a fresh directory the unprivileged PostgreSQL user can reach
// (t.TempDir's directories are 0700, closed to it when tests run as root).
func StateDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "state")
}

// Notify listens where a program run under systemd sends sd_notify
// messages.
type Notify struct {
	Path string
	msgs chan string
}

// NewNotify opens a notify socket for the test.
func NewNotify(t testing.TB) *Notify {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &Notify{Path: path, msgs: make(chan string, 64)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			for _, line := range strings.Split(string(buf[:k]), "\n") {
				n.msgs <- line
			}
		}
	}()
	return n
}

// Env is the environment entry that points a process at this socket.
func (n *Notify) Env() string { return "NOTIFY_SOCKET=" + n.Path }

// WaitFor waits for the message want (e.g. "READY=1").
func (n *Notify) WaitFor(t testing.TB, want string, within time.Duration) {
	t.Helper()
	n.wait(t, want, within, func(m string) bool { return m == want })
}

// WaitForPrefix waits for a message that starts with prefix, and returns it.
func (n *Notify) WaitForPrefix(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	return n.wait(t, prefix+"…", within, func(m string) bool { return strings.HasPrefix(m, prefix) })
}

// wait returns the first message match takes, passing over the others, or
// fails the test after within.
func (n *Notify) wait(t testing.TB, what string, within time.Duration, match func(string) bool) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				t.Fatalf("notify socket closed before %s", what)
			}
			if match(m) {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s within %v", what, within)
			return ""
		}
	}
}

// Proc is a running binary.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout *Buffer
	Stderr *Buffer
	done   chan error
	err    error
	exited bool
}

// Start runs bin with args and extra environment; it is killed when the
// test ends, if still running.
func Start(t testing.TB, env []string, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), Stdout: &Buffer{}, Stderr: &Buffer{}, done: make(chan error, 1)}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		p.Wait(t, time.Minute)
	})
	return p
}

// Wait waits for the process to exit and returns its error.
func (p *Proc) Wait(t testing.TB, within time.Duration) error {
	t.Helper()
	if p.exited {
		return p.err
	}
	select {
	case p.err = <-p.done:
		p.exited = true
		return p.err
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v; stderr:\n%s", p.Cmd.Path, within, p.Stderr)
		return nil
	}
}

// Stop sends SIGTERM and requires a clean exit.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(t, 30*time.Second); err != nil {
		t.Fatalf("%s exited with %v after SIGTERM; stderr:\n%s", p.Cmd.Path, err, p.Stderr)
	}
}

// Eventually waits until cond holds.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Buffer collects a process's output; safe to read while it writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ReadEnvFile reads dev.env.
func ReadEnvFile(t testing.TB, path string) map[string]string {
	t.Helper()
	env, err := devenv.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Run runs a binary to completion and returns its combined output.
func Run(t testing.TB, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MustRun is Run that fails the test on error.
func MustRun(t testing.TB, env []string, bin string, args ...string) string {
	t.Helper()
	out, err := Run(t, env, bin, args...)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return out
}

// StepVersion is the step CLI the interop tests use.
const StepVersion = "v0.29.0"

// Step returns the step CLI, building it with `go install` into the user's
// cache on first use (minutes, once per machine; later runs reuse it).
func Step(t testing.TB) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "runmesh-tools", "step-"+StepVersion)
	bin := filepath.Join(dir, "step")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	t.Logf("building the step CLI %s into %s (once per machine)", StepVersion, dir)
	cmd := exec.Command("go", "install", "github.com/smallstep/cli/cmd/step@"+StepVersion)
	cmd.Dir = os.TempDir() // outside our module: install exactly that version
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install step: %v\n%s", err, out)
	}
	return bin
}

// Fields of one JSON log line, for matching.
func (s *Buffer) HasLog(msg string) bool {
	return strings.Contains(s.String(), fmt.Sprintf(`"msg":%q`, msg))
}

// Dev is a running `runmesh-server dev`.
type Dev struct {
	*Proc
	State   string            // its state directory
	EnvFile string            // <state>/dev.env
	Env     map[string]string // what dev.env says
}

// GraphQL runs one operation against the dev server's admin API as its
// platform admin, fails the test on any error, and returns data.
func (d Dev) GraphQL(t testing.TB, query string, vars map[string]any) map[string]any {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, d.Env["RUNMESH_ADMIN_URL"]+"/graphql", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.Env["RUNMESH_ADMIN_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data   map[string]any
		Errors []any
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("graphql: HTTP %d: %v", resp.StatusCode, err)
	}
	if len(out.Errors) > 0 {
		t.Fatalf("graphql: %v", out.Errors)
	}
	return out.Data
}

// DevArgs runs `runmesh-server dev` on state with both listeners on free
// loopback ports.
func DevArgs(state string) []string {
	return []string{"dev", "--state-dir", state, "--admin-addr", "127.0.0.1:0", "--runner-addr", "127.0.0.1:0"}
}

// StartDev runs `runmesh-server dev` in a fresh state directory with both
// listeners on free loopback ports, plus args, and returns once it has
// sent READY=1.
func StartDev(t testing.TB, serverBin string, args ...string) Dev {
	t.Helper()
	state := StateDir(t)
	notify := NewNotify(t)
	p := Start(t, []string{notify.Env()}, serverBin, append(DevArgs(state), args...)...)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	envFile := filepath.Join(state, devenv.FileName)
	return Dev{Proc: p, State: state, EnvFile: envFile, Env: ReadEnvFile(t, envFile)}
}

// Replica is a second control-plane process beside a Dev: `runmesh-server
// serve` on the dev server's database and CA, with listeners of its own.
type Replica struct {
	*Proc
	AdminURL, RunnerURL string
	// EnvFile is a dev.env for the CLI that speaks to this replica, as the
	// dev server's platform admin.
	EnvFile string
}

// Replica starts another server process on d's database and CA, its
// listeners on host (a loopback address: 127.0.0.2 is another address
// than the dev server's), and returns once it is serving.
func (d Dev) Replica(t testing.TB, serverBin, host string) Replica {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(d.State, "postgres", "postmaster.pid"))
	if err != nil {
		t.Fatalf("the dev server's PostgreSQL: %v", err)
	}
	// postmaster.pid: pid, data dir, start time, port, socket directory.
	lines := strings.Split(string(pid), "\n")
	if len(lines) < 5 {
		t.Fatalf("postmaster.pid: %q", pid)
	}
	dir := t.TempDir()
	urlFile, cfg := filepath.Join(dir, "db-url"), filepath.Join(dir, "server.yaml")
	dbURL := fmt.Sprintf("postgres:///runmesh?host=%s&port=%s&user=postgres", strings.TrimSpace(lines[4]), strings.TrimSpace(lines[3]))
	if err := os.WriteFile(urlFile, []byte(dbURL), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(
		"version: 1\nstate_dir: %s\ndatabase: {url_file: %s}\nadmin: {listen: '%s:0'}\nrunner: {listen: '%s:0', names: ['%s']}\n",
		d.State, urlFile, host, host, host)), 0o600); err != nil {
		t.Fatal(err)
	}
	notify := NewNotify(t)
	p := Start(t, []string{notify.Env()}, serverBin, "serve", "--config", cfg)
	notify.WaitFor(t, "READY=1", 90*time.Second)
	r := Replica{Proc: p}
	Eventually(t, 10*time.Second, "the replica to log its listeners", func() bool {
		r.AdminURL, r.RunnerURL = logged(p, "admin listener up"), logged(p, "runner listener up")
		return r.AdminURL != "" && r.RunnerURL != ""
	})
	r.AdminURL, r.RunnerURL = "http://"+r.AdminURL, "https://"+r.RunnerURL
	r.EnvFile = filepath.Join(dir, devenv.FileName)
	env := map[string]string{"RUNMESH_ADMIN_URL": r.AdminURL, "RUNMESH_ADMIN_TOKEN": d.Env["RUNMESH_ADMIN_TOKEN"]}
	if err := devenv.Write(r.EnvFile, env); err != nil {
		t.Fatal(err)
	}
	return r
}

// logged is the address a server logged with msg ("" before it did).
func logged(p *Proc, msg string) string {
	for _, line := range strings.Split(p.Stderr.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	return ""
}
