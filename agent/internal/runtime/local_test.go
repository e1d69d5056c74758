package runtime_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

func TestParseUnitName(t *testing.T) {
	t.Parallel()
	lease := "0b5c3c1e-6f0e-4a51-9d7a-3f1f2f0c9a10"
	got, attempt, ok := runtime.ParseUnitName("runmesh-job-" + lease + "-12.service")
	if !ok || got != lease || attempt != 12 {
		t.Fatalf("got %q %d %v", got, attempt, ok)
	}
	for _, bad := range []string{"runmesh-job-" + lease + ".service", "runmesh-job-x-0.service", "other-" + lease + "-1.service", "runmesh-job-" + lease + "-1.scope", "runmesh-job--1.service"} {
		if _, _, ok := runtime.ParseUnitName(bad); ok {
			t.Errorf("%s parsed", bad)
		}
	}
}

// The tests below need the runmesh user's systemd manager and rootless
// podman: they run inside agent/sandbox (make test-e2e).
func local(t *testing.T) *runtime.Local {
	t.Helper()
	if os.Getenv("RUNMESH_SANDBOX") == "" {
		t.Skip("runs inside agent/sandbox (make test-e2e)")
	}
	ctx := context.Background()
	facts, err := runtime.ProbePodman(ctx, "/usr/bin/podman")
	if err != nil {
		t.Fatal(err)
	}
	host := runtime.NewHost("/usr/bin/podman", facts, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "runmesh"), filepath.Join(os.Getenv("HOME"), "logs"))
	host.DataDir = filepath.Join(os.Getenv("HOME"), "data")
	r, err := runtime.Connect(ctx, host, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "podman", "podman.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func jobSpec(cmd ...string) runtime.Spec {
	id := uuid.NewString()
	return runtime.Spec{JobID: id, LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Command: cmd, Cores: 1, WallClockSeconds: 120}
}

func waitEnded(t *testing.T, r *runtime.Local, unit string) runtime.Status {
	t.Helper()
	var s runtime.Status
	testutil.Eventually(t, 60*time.Second, func() bool {
		var err error
		if s, err = r.Status(context.Background(), unit); err != nil {
			t.Fatal(err)
		}
		return s.Ended
	}, "%s ended", unit)
	return s
}

// containers lists the containers podman has for a lease, running or not.
// start starts the job, failing the test if it cannot.
func start(t *testing.T, r *runtime.Local, j runtime.Spec) runtime.Unit {
	t.Helper()
	u, err := r.Start(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// noContainerLeft checks that the ended job's container is gone, then
// forgets its unit.
func noContainerLeft(t *testing.T, r *runtime.Local, lease, unit string) {
	t.Helper()
	if c := containers(t, lease); c != "" {
		t.Fatalf("container %s left behind", c)
	}
	if err := r.Forget(context.Background(), unit); err != nil {
		t.Fatal(err)
	}
}

func containers(t *testing.T, lease string) string {
	t.Helper()
	out, err := exec.Command("podman", "ps", "-a", "-q", "--filter", "label="+runtime.LabelLease+"="+lease).CombinedOutput()
	if err != nil {
		t.Fatalf("podman ps: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestAJobEndsWithItsExitCode(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	// The environment reaches the container through its file, and
	// ${API_KEY} as one word is what systemd would expand from its own
	// environment if the unit did not escape it.
	j := jobSpec("sh", "-c", "echo hello; test ${API_KEY} = s3cret-value && exit 3; exit 1")
	j.Env = map[string]string{"API_KEY": "s3cret-value"}
	u := start(t, r, j)
	unit := u.Name
	s := waitEnded(t, r, unit)
	if s.ExitCode == nil || *s.ExitCode != 3 || s.Result != "exit-code" || s.WallClock {
		t.Fatalf("status %+v, want exit code 3", s)
	}
	// The output outlives the container.
	raw, err := os.ReadFile(u.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := runtime.ReadOutput(raw); err != nil || string(out) != "hello\n" {
		t.Fatalf("output %q (%v), want hello", out, err)
	}
	noContainerLeft(t, r, j.LeaseID, unit)
	if _, err := r.Status(ctx, unit); err == nil {
		survivors, _ := r.Survivors(ctx)
		for _, s := range survivors {
			if s.Unit == unit {
				t.Fatalf("%s is still listed after Forget", unit)
			}
		}
	}
}

func TestStopEndsAJobAndItsContainer(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	j := jobSpec("sleep", "300")
	unit := start(t, r, j).Name
	if containers(t, j.LeaseID) == "" {
		t.Fatal("no container while the unit runs")
	}
	start := time.Now()
	if err := r.Stop(ctx, unit); err != nil {
		t.Fatal(err)
	}
	s := waitEnded(t, r, unit)
	took := time.Since(start)
	t.Logf("stopped in %v: result %s", took.Round(time.Millisecond), s.Result)
	// The payload ignores nothing: SIGTERM ends it well before podman
	// stop's 10 s grace would.
	if took > 5*time.Second {
		t.Fatalf("stop took %v: SIGTERM did not reach the payload", took)
	}
	noContainerLeft(t, r, j.LeaseID, unit)
}

func TestTheWallClockStopsAJob(t *testing.T) {
	r := local(t)
	j := jobSpec("sleep", "300")
	j.WallClockSeconds = 2
	unit := start(t, r, j).Name
	start := time.Now()
	s := waitEnded(t, r, unit)
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("a 2 s wall clock took %v to stop the job", took)
	}
	if !s.WallClock || s.Result != "timeout" {
		t.Fatalf("status %+v, want stopped by the wall clock", s)
	}
	noContainerLeft(t, r, j.LeaseID, unit)
}

func TestAJobOutlivesTheAgentsConnection(t *testing.T) {
	first := local(t)
	ctx := context.Background()
	j := jobSpec("sleep", "300")
	unit := start(t, first, j).Name
	first.Close() // the agent goes away

	again := local(t)
	survivors, err := again.Survivors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *runtime.Survivor
	for i := range survivors {
		if survivors[i].Unit == unit {
			found = &survivors[i]
		}
	}
	if found == nil || found.LeaseID != j.LeaseID || found.Attempt != 1 || found.ActiveState != "active" {
		t.Fatalf("survivors %+v lack %s running", survivors, unit)
	}
	// The same lease and attempt cannot be started twice.
	if _, err := again.Start(ctx, j); err == nil {
		t.Fatal("a second unit for the same attempt started")
	}
	if err := again.Stop(ctx, unit); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, again, unit)
	_ = again.Forget(ctx, unit)
}

func TestASucceededJobKeepsItsResultUntilForgotten(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	j := jobSpec("true")
	u, err := r.Start(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	s := waitEnded(t, r, u.Name)
	// Read again a while later (a wait in which nothing may change):
	// systemd would have dropped a unit that exited 0 at once, and with it
	// the result.
	time.Sleep(time.Second)
	if s, err = r.Status(ctx, u.Name); err != nil {
		t.Fatal(err)
	}
	if !s.Ended || s.ExitCode == nil || *s.ExitCode != 0 || s.WallClock {
		t.Fatalf("status %+v, want ended with exit code 0", s)
	}
	if err := r.Forget(ctx, u.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(u.EnvPath); !os.IsNotExist(err) {
		t.Fatalf("the env file outlived Forget: %v", err)
	}
	if err := r.Forget(ctx, u.Name); err != nil {
		t.Fatalf("forgetting a unit that is gone: %v", err)
	}
	survivors, err := r.Survivors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range survivors {
		if s.Unit == u.Name {
			t.Fatalf("%s is still listed after Forget: %+v", u.Name, s)
		}
	}
}

func TestAMissingImageIsAFailedStartNotAnExitCode(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	j := jobSpec("true")
	j.Image = "localhost/not-there:latest"
	u, err := r.Start(ctx, j)
	if err == nil {
		t.Fatal("a job whose image is not there started")
	}
	t.Logf("start: %v", err)
	s := waitEnded(t, r, u.Name)
	if !s.StartFailed || s.ExitCode != nil || s.WallClock {
		t.Fatalf("status %+v, want a failed start without an exit code", s)
	}
	if err := r.Forget(ctx, u.Name); err != nil {
		t.Fatal(err)
	}
}

// An interactive job runs as podman was told: its stdin open with no one
// attached, a terminal for TTY and raw pipes for PIPE, and its output in
// no file (podman's log driver none, nothing in the log directory).
func TestAnInteractiveJobRunsWithItsStreamsAndNoLog(t *testing.T) {
	r := local(t)
	ctx := context.Background()
	logs := filepath.Join(os.Getenv("HOME"), "logs")
	for _, c := range []struct {
		mode     runnerapi.Stdio
		inspect  string // stdin open, a terminal, the log driver
		terminal int    // test -t 0's exit status
	}{
		{runnerapi.StdioTTY, "true true none", 0},
		{runnerapi.StdioPipe, "true false none", 1},
	} {
		talker := jobSpec("sh", "-c", "echo never-stored; echo never-stored >&2; sleep 300")
		talker.Stdio = c.mode
		u, err := r.Start(ctx, talker)
		if err != nil {
			t.Fatal(err)
		}
		if u.LogPath != "" {
			t.Errorf("%s: log path %q", c.mode, u.LogPath)
		}
		testutil.Eventually(t, 60*time.Second, func() bool { return containers(t, talker.LeaseID) != "" }, "%s: its container", c.mode)
		out, err := exec.Command("podman", "inspect", "--format", "{{.Config.OpenStdin}} {{.Config.Tty}} {{.HostConfig.LogConfig.Type}}",
			u.Container()).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.inspect {
			t.Errorf("%s: podman inspect: %q (%v), want %q", c.mode, out, err, c.inspect)
		}
		if err := r.Stop(ctx, u.Name); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, r, u.Name)
		_ = r.Forget(ctx, u.Name)

		probe := jobSpec("test", "-t", "0")
		probe.Stdio = c.mode
		p, err := r.Start(ctx, probe)
		if err != nil {
			t.Fatal(err)
		}
		if s := waitEnded(t, r, p.Name); s.ExitCode == nil || *s.ExitCode != c.terminal {
			t.Errorf("%s: test -t 0 ended %+v, want exit status %d", c.mode, s, c.terminal)
		}
		_ = r.Forget(ctx, p.Name)

		files, err := os.ReadDir(logs)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.Contains(f.Name(), talker.LeaseID) && !strings.HasSuffix(f.Name(), ".start.log") {
				t.Errorf("%s: %s in the log directory", c.mode, f.Name())
			}
			if b, _ := os.ReadFile(filepath.Join(logs, f.Name())); strings.Contains(string(b), "never-stored") {
				t.Errorf("%s: its output is in %s", c.mode, f.Name())
			}
		}
	}
}
