package runtime_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	leaseID = "0b5c3c1e-6f0e-4a51-9d7a-3f1f2f0c9a10"
	gpu0    = "GPU-6a3a4a8e-1111-2222-3333-444455556666"
	gpu1    = "GPU-7b4b5b9f-7777-8888-9999-000011112222"
)

func spec() runtime.Spec {
	return runtime.Spec{
		JobID: leaseID, LeaseID: leaseID, Attempt: 2, Image: "localhost/busybox:latest",
		Command: []string{"sh", "-c", "echo hello ${MODE} $$; exit 3"},
		Env:     map[string]string{"API_KEY": "s3cret-value", "MODE": "train"},
		Cores:   2.5, MemoryMiB: 4096, WallClockSeconds: 3600,
	}
}

func v1Host() runtime.Host {
	facts := runtime.PodmanFacts{CgroupVersion: "v1", Rootless: true}
	return runtime.NewHost("/usr/bin/podman", facts, "/run/user/990/runmesh", "/var/lib/runmesh-agent/logs")
}

func v2Host(controllers ...string) runtime.Host {
	facts := runtime.PodmanFacts{CgroupVersion: "v2", Rootless: true, Controllers: controllers, Network: "pasta"}
	h := runtime.NewHost("/usr/bin/podman", facts, "/run/user/990/runmesh/", "/var/lib/runmesh-agent/logs")
	h.CDIDevices = []string{"nvidia.com/gpu=0", "nvidia.com/gpu=" + gpu0, "nvidia.com/gpu=" + gpu1}
	return h
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		host runtime.Host
		job  func(*runtime.Spec)
	}{
		// This host's case: rootless on cgroup v1 enforces nothing, so no
		// limit flags are passed for podman to ignore.
		"cgroup-v1-rootless": {v1Host(), nil},
		"cgroup-v2-gpus-network": {v2Host("cpu", "memory", "pids", "io"), func(j *runtime.Spec) {
			j.GPUs, j.Network, j.Env, j.Attempt = []string{gpu1, gpu0}, true, nil, 1
			j.WorkingDir, j.ScratchMiB = "/work/run 1", 1024
		}},
		"cgroup-v2-memory-only": {v2Host("memory"), func(j *runtime.Spec) { j.WallClockSeconds = 0; j.Command = nil }},
		// Inputs read-only at /inputs, outputs at /outputs.
		"cgroup-v1-data": {withData(v1Host()), func(j *runtime.Spec) { j.Inputs, j.Outputs = true, true }},
		// Interactive: no log file, stdin kept open, a terminal for TTY.
		"cgroup-v2-tty":  {v2Host("memory", "pids"), func(j *runtime.Spec) { j.Stdio, j.Command = runnerapi.StdioTTY, []string{"bash"} }},
		"cgroup-v1-pipe": {v1Host(), func(j *runtime.Spec) { j.Stdio = runnerapi.StdioPipe }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := spec()
			if c.job != nil {
				c.job(&j)
			}
			u, err := runtime.Render(c.host, j)
			if err != nil {
				t.Fatal(err)
			}
			got := describe(c.host, u)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./agent/internal/runtime -run TestRenderGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Fatalf("%s differs from the rendering:\n%s", path, got)
			}
		})
	}
}

// describe prints a unit the way a reviewer reads one.
func describe(h runtime.Host, u runtime.Unit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# enforcement: memory=%v cpu=%v pids=%v", h.Enforce.Memory, h.Enforce.CPU, h.Enforce.Pids)
	if h.Enforce.Reason != "" {
		fmt.Fprintf(&b, " (%s)", h.Enforce.Reason)
	}
	fmt.Fprintf(&b, "\nunit %s\ncontainer %s\n", u.Name, u.Container())
	for _, p := range u.Properties {
		switch v := p.Value.(type) {
		case []runtime.Exec:
			for _, e := range v {
				fmt.Fprintf(&b, "%s=%s\n", p.Name, argv(e.Argv))
			}
		case []string:
			fmt.Fprintf(&b, "%s=%s\n", p.Name, argv(v))
		default:
			fmt.Fprintf(&b, "%s=%v\n", p.Name, v)
		}
	}
	fmt.Fprintf(&b, "env file %s:\n%s", u.EnvPath, u.EnvFile)
	return b.String()
}

func argv(a []string) string {
	q := make([]string, len(a))
	for i, s := range a {
		q[i] = s
		if s == "" || strings.ContainsAny(s, " \t;\"'$") {
			q[i] = strconv.Quote(s)
		}
	}
	return strings.Join(q, " ")
}

func TestEnvValuesNeverReachTheUnit(t *testing.T) {
	t.Parallel()
	u, err := runtime.Render(v1Host(), spec())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range u.Properties {
		if s := fmt.Sprint(p.Value); strings.Contains(s, "s3cret-value") {
			t.Fatalf("property %s carries an environment value: %s", p.Name, s)
		}
	}
	if !strings.Contains(string(u.EnvFile), "API_KEY=s3cret-value\n") {
		t.Fatalf("the env file lacks the value: %q", u.EnvFile)
	}
}

func withData(h runtime.Host) runtime.Host {
	h.DataDir = "/var/lib/runmesh-agent/work/data"
	return h
}

// A job with data needs a data directory podman can name in a --mount.
func TestRenderRefusesDataWithoutADataDirectory(t *testing.T) {
	t.Parallel()
	j := spec()
	j.Inputs = true
	for _, h := range []runtime.Host{v1Host(), func() runtime.Host { h := v1Host(); h.DataDir = "/srv/a,b"; return h }()} {
		if _, err := runtime.Render(h, j); !errors.Is(err, runtime.ErrUnrunnable) {
			t.Errorf("data dir %q: %v", h.DataDir, err)
		}
	}
}

func TestRenderRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		host runtime.Host
		job  func(*runtime.Spec)
		want string
	}{
		"GPU without a CDI device":    {v1Host(), func(j *runtime.Spec) { j.GPUs = []string{gpu0} }, "GPU " + gpu0 + " has no CDI device"},
		"env name with =":             {v1Host(), func(j *runtime.Spec) { j.Env = map[string]string{"A=B": "x"} }, `environment name "A=B"`},
		"env name prefix match":       {v1Host(), func(j *runtime.Spec) { j.Env = map[string]string{"AWS*": ""} }, `environment name "AWS*"`},
		"env value with a newline":    {v1Host(), func(j *runtime.Spec) { j.Env = map[string]string{"PEM": "a\nb"} }, "the value of PEM has a line break"},
		"env value quoted":            {v1Host(), func(j *runtime.Spec) { j.Env = map[string]string{"Q": `"x"`} }, "the value of Q starts with a quote"},
		"image like a flag":           {v1Host(), func(j *runtime.Spec) { j.Image = "--privileged" }, `image "--privileged"`},
		"lease id with a slash":       {v1Host(), func(j *runtime.Spec) { j.LeaseID = "../x" }, "ids must be letters"},
		"attempt 0":                   {v1Host(), func(j *runtime.Spec) { j.Attempt = 0 }, "attempt 0"},
		"a network on a host without": {v1Host(), func(j *runtime.Spec) { j.Network = true }, "neither pasta nor slirp4netns"},
		"working directory relative":  {v1Host(), func(j *runtime.Spec) { j.WorkingDir = "work" }, `working directory: "work" is not a clean absolute path`},
		"working directory with ..":   {v1Host(), func(j *runtime.Spec) { j.WorkingDir = "/a/../etc" }, "not a clean absolute path"},
		"negative scratch":            {v1Host(), func(j *runtime.Spec) { j.ScratchMiB = -1 }, "scratch of -1 MiB"},
		"a mode it does not know":     {v1Host(), func(j *runtime.Spec) { j.Stdio = "RAW" }, `stdio "RAW" is not a mode this agent runs`},
	} {
		j := spec()
		c.job(&j)
		_, err := runtime.Render(c.host, j)
		if !errors.Is(err, runtime.ErrUnrunnable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrUnrunnable saying %q", name, err, c.want)
		}
	}
	bad := v1Host()
	bad.Podman = "podman"
	if _, err := runtime.Render(bad, spec()); err == nil || errors.Is(err, runtime.ErrUnrunnable) {
		t.Errorf("a relative podman path is the agent's fault, not the job's: %v", err)
	}
}

// An interactive job's bytes go to no file: podman's log driver none and
// no log path, where a batch job has its log file; its stdin stays open,
// and only a TTY job gets a terminal.
func TestAnInteractiveJobIsLoggedNowhere(t *testing.T) {
	t.Parallel()
	for mode, want := range map[runnerapi.Stdio]struct {
		driver           string
		interactive, tty bool
	}{
		runnerapi.StdioLogs: {"--log-driver=k8s-file", false, false},
		runnerapi.StdioPipe: {"--log-driver=none", true, false},
		runnerapi.StdioTTY:  {"--log-driver=none", true, true},
	} {
		j := spec()
		j.Stdio = mode
		u, err := runtime.Render(v2Host("memory"), j)
		if err != nil {
			t.Fatal(err)
		}
		var run []string
		for _, p := range u.Properties {
			if p.Name == "ExecStart" {
				run = p.Value.([]runtime.Exec)[0].Argv
			}
		}
		image := slices.Index(run, j.Image) // the job's own arguments are not podman's
		if image < 0 {
			t.Fatalf("%q: no image in %q", mode, run)
		}
		opts := run[:image]
		logged := slices.ContainsFunc(opts, func(a string) bool { return strings.HasPrefix(a, "path=") })
		if !slices.Contains(opts, want.driver) || slices.Contains(opts, "--interactive") != want.interactive ||
			slices.Contains(opts, "--tty") != want.tty || logged != !mode.Interactive() {
			t.Errorf("%q: %s", mode, argv(opts))
		}
		if (u.LogPath == "") != mode.Interactive() {
			t.Errorf("%q: log path %q", mode, u.LogPath)
		}
	}
}

func TestDetectEnforcement(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		facts  runtime.PodmanFacts
		want   [3]bool
		reason string
	}{
		"rootless v1":          {runtime.PodmanFacts{CgroupVersion: "v1", Rootless: true}, [3]bool{}, "rootless Podman ignores resource limits"},
		"rootful v1":           {runtime.PodmanFacts{CgroupVersion: "v1"}, [3]bool{true, true, true}, ""},
		"v2 fully delegated":   {runtime.PodmanFacts{CgroupVersion: "v2", Rootless: true, Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}}, [3]bool{true, true, true}, ""},
		"v2 default delegated": {runtime.PodmanFacts{CgroupVersion: "v2", Rootless: true, Controllers: []string{"memory", "pids"}}, [3]bool{true, false, true}, "without the cpu controller"},
		"unknown":              {runtime.PodmanFacts{CgroupVersion: ""}, [3]bool{}, `cgroup version ""`},
	} {
		e := runtime.DetectEnforcement(c.facts)
		if got := [3]bool{e.Memory, e.CPU, e.Pids}; got != c.want || !strings.Contains(e.Reason, c.reason) || (c.reason == "") != (e.Reason == "") {
			t.Errorf("%s: got %+v, want %v with reason %q", name, e, c.want, c.reason)
		}
	}
}

// systemd refuses a transient unit whose property has the wrong D-Bus
// type, so the signatures are checked here rather than first on a host.
func TestDBusSignatures(t *testing.T) {
	t.Parallel()
	u, err := runtime.Render(v2Host("memory", "cpu", "pids"), spec())
	if err != nil {
		t.Fatal(err)
	}
	props, err := u.DBus()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Description": "s", "Type": "s", "NotifyAccess": "s", "KillMode": "s", "RemainAfterExit": "b", "Environment": "as",
		"TimeoutStartUSec": "t", "TimeoutStopUSec": "t", "RuntimeMaxUSec": "t", "Delegate": "b", "StandardErrorFileToAppend": "s",
		"ExecStart": "a(sasb)", "ExecStop": "a(sasb)", "ExecStopPost": "a(sasb)",
	}
	if len(props) != len(want) {
		t.Fatalf("%d properties, want %d", len(props), len(want))
	}
	for _, p := range props {
		if got := p.Value.Signature().String(); got != want[p.Name] {
			t.Errorf("%s has signature %q, want %q", p.Name, got, want[p.Name])
		}
	}
}

func TestParsePodmanInfo(t *testing.T) {
	t.Parallel()
	// Trimmed from `podman info --format json` (podman 4.3, rootless,
	// cgroup v1) as the runmesh user runs it.
	v1 := `{"host":{"arch":"amd64","cgroupManager":"cgroupfs","cgroupVersion":"v1","cgroupControllers":[],"security":{"rootless":true},` +
		`"slirp4netns":{"executable":"/usr/bin/slirp4netns","package":"slirp4netns_1.2.0-1_amd64"},"eventLogger":"file"},"store":{"graphDriverName":"overlay"}}`
	f, err := runtime.ParsePodmanInfo([]byte(v1))
	if err != nil {
		t.Fatal(err)
	}
	if f.Cgroup() != 1 || !f.Rootless || runtime.DetectEnforcement(f).Memory || f.Network != "slirp4netns" || f.EventLogger != "file" {
		t.Fatalf("v1 rootless read as %+v", f)
	}
	// podman 5 has pasta (and often slirp4netns too): pasta, its default.
	v2 := `{"host":{"cgroupVersion":"v2","cgroupControllers":["cpu","memory","pids"],"security":{"rootless":true},` +
		`"pasta":{"executable":"/usr/bin/pasta"},"slirp4netns":{"executable":"/usr/bin/slirp4netns"}}}`
	f, err = runtime.ParsePodmanInfo([]byte(v2))
	if err != nil {
		t.Fatal(err)
	}
	if e := runtime.DetectEnforcement(f); !e.Memory || !e.CPU || !e.Pids || f.Network != "pasta" {
		t.Fatalf("v2 with cpu, memory and pids delegated read as %+v", f)
	}
	for _, bad := range []string{`{}`, `not json`, `{"host":{"cgroupVersion":""}}`} {
		if _, err := runtime.ParsePodmanInfo([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestProbePodmanSaysWhyItFailed(t *testing.T) {
	t.Parallel()
	_, err := runtime.ProbePodman(t.Context(), "/nonexistent/podman")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/podman info") {
		t.Fatalf("got %v", err)
	}
}

func TestReadOutput(t *testing.T) {
	t.Parallel()
	log := "2026-11-30T13:00:00.000000001+00:00 stdout F hello\n" +
		"2026-11-30T13:00:00.000000002+00:00 stderr P par\n" +
		"2026-11-30T13:00:00.000000003+00:00 stderr F tial line\n" +
		"2026-11-30T13:00:00.000000004+00:00 stdout F \n" +
		"2026-11-30T13:00:00.000000005+00:00 stdout F not yet compl"
	out, used, err := runtime.ReadOutput([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "hello\npartial line\n\n" {
		t.Fatalf("got %q", out)
	}
	if used != strings.LastIndex(log, "\n")+1 {
		t.Fatalf("used %d bytes, want up to the last complete record", used)
	}
	if _, _, err := runtime.ReadOutput([]byte("garbage\n")); err == nil {
		t.Fatal("a line that is no record was accepted")
	}
}
