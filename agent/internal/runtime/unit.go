package runtime

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// Labels every job container carries; the survivor check finds containers
// by them.
const (
	LabelJob     = "runmesh.job"
	LabelLease   = "runmesh.lease"
	LabelAttempt = "runmesh.attempt"
)

// UnitPrefix starts the name of every job unit.
const UnitPrefix = "runmesh-job-"

// Host is what rendering needs to know about this machine, found once at
// start-up.
type Host struct {
	// Podman is the absolute path of the podman binary: a unit's Exec
	// lines take no search path.
	Podman string
	// Cgroup is the cgroup version Podman reports: 1 or 2.
	Cgroup int
	// Enforce says which limits the host is known to enforce.
	Enforce Enforcement
	// Network is the rootless network a job with one gets (PodmanFacts);
	// "": such a job cannot run here.
	Network string
	// CDIDevices are the CDI device names the host has, such as
	// "nvidia.com/gpu=GPU-…"; a GPU is passed only through one of them.
	CDIDevices []string
	// EnvDir holds the jobs' environment files (mode 0700, the runmesh
	// user's): values can be secrets and never go on a command line.
	EnvDir string
	// LogDir holds the jobs' output (on disk, not a tmpfs: output can be
	// large). It outlives the container, which --rm removes, until the
	// agent has uploaded it.
	LogDir string
	// DataDir holds each attempt's inputs and outputs (Paths.Inputs,
	// Paths.Outputs); "": jobs with data cannot run here.
	DataDir string
}

// NewHost derives a Host from what podman said: the cgroup version and
// which limits hold come from facts alone.
func NewHost(podman string, facts PodmanFacts, envDir, logDir string) Host {
	return Host{Podman: podman, Cgroup: facts.Cgroup(), Enforce: DetectEnforcement(facts), Network: facts.Network, EnvDir: envDir, LogDir: logDir}
}

// Paths are the names a lease's attempt has on a host: a restarted agent
// finds an adopted job's output by them.
type Paths struct {
	Container, Unit, Env, Log string
	// StartLog is podman run's own stderr: why a container did not start.
	StartLog string
	// Data holds Inputs (mounted read-only at /inputs) and Outputs
	// (mounted at /outputs); "" without a DataDir.
	Data, Inputs, Outputs string
}

// Paths names the unit, container, environment file and log of a lease's
// attempt.
func (h Host) Paths(leaseID string, attempt int) Paths {
	c := fmt.Sprintf("%s%s-%d", UnitPrefix, leaseID, attempt)
	p := Paths{
		Container: c, Unit: c + ".service",
		Env:      strings.TrimSuffix(h.EnvDir, "/") + "/" + c + ".env",
		Log:      strings.TrimSuffix(h.LogDir, "/") + "/" + c + ".log",
		StartLog: strings.TrimSuffix(h.LogDir, "/") + "/" + c + ".start.log",
	}
	if h.DataDir != "" {
		p.Data = strings.TrimSuffix(h.DataDir, "/") + "/" + c
		p.Inputs, p.Outputs = p.Data+"/inputs", p.Data+"/outputs"
	}
	return p
}

// Spec is what to run: one attempt of a lease.
type Spec struct {
	JobID   string
	LeaseID string
	Attempt int
	Image   string
	Command []string
	// Env goes to the container through a file, never through argv.
	Env       map[string]string
	Cores     float64
	MemoryMiB int64
	// GPUs are the UUIDs of the GPUs the agent gave this job.
	GPUs []string
	// WallClockSeconds bounds the unit's run time; 0 is no bound.
	WallClockSeconds int
	// Network gives the job the host's rootless network instead of none.
	Network bool
	// WorkingDir is the container's working directory; "": the image's.
	WorkingDir string
	// ScratchMiB sizes a tmpfs at /scratch; 0: none.
	ScratchMiB int64
	// Inputs and Outputs: the attempt's data directories (Paths) are
	// mounted at /inputs (read-only) and /outputs.
	Inputs, Outputs bool
	// Stdio is the job's mode: LOGS (the zero value) writes its output to
	// the log file the agent uploads; TTY and PIPE keep its stdin open and
	// write its output to no file at all (StdioModes).
	Stdio runnerapi.Stdio
}

// StdioModes are the interactive modes Render runs, which the agent names
// when it asks for work (runnerapi.LeaseRequest.Stdio).
var StdioModes = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe}

// Unit is a rendered job: start a transient unit Name with Properties.
type Unit struct {
	Name       string
	Properties []Property
	// EnvFile is written to EnvPath (mode 0600) before the unit starts;
	// ExecStopPost removes it.
	EnvPath string
	EnvFile []byte
	// LogPath is where podman writes the job's output, in the CRI log
	// format (see ReadOutput); "" for an interactive job, whose output
	// podman writes nowhere.
	LogPath string
}

// Container is the name of the unit's container: the unit's, without
// ".service".
func (u Unit) Container() string { return strings.TrimSuffix(u.Name, ".service") }

// Property is one unit property. Value is a string, bool, uint64,
// []string or []Exec, the D-Bus types systemd expects for the name.
type Property struct {
	Name  string
	Value any
}

// Exec is one command of an Exec* property.
type Exec struct {
	Argv          []string
	IgnoreFailure bool
}

// ErrUnrunnable marks a job this host cannot run as asked; the error says
// why.
var ErrUnrunnable = errors.New("job cannot run on this host")

// Timeouts a unit gets. A start covers creating the container from a
// local image; a stop gives the payload podman's 10 s and podman the rest.
const (
	startTimeout = 5 * time.Minute
	stopTimeout  = 30 * time.Second
	stopGrace    = 10 // seconds podman stop waits before SIGKILL
)

// Render builds the unit for job on host: the properties of a transient
// unit in the runmesh user's manager and the `podman run` command line it
// starts. It is a pure function of the job and the host's facts, so every
// choice it makes is checked by golden files without a systemd or a
// Podman.
func Render(h Host, j Spec) (Unit, error) {
	if err := check(h, j); err != nil {
		return Unit{}, err
	}
	env, err := envFile(j.Env)
	if err != nil {
		return Unit{}, err
	}
	if !strings.HasPrefix(h.LogDir, "/") {
		return Unit{}, fmt.Errorf("log directory %q is not absolute", h.LogDir)
	}
	// The lease id is the job's and stays the same across attempts, so the
	// attempt is part of the name: a unit left from an earlier attempt
	// stopping (its ExecStopPost removes the container by name) can never
	// touch a later one's container.
	paths := h.Paths(j.LeaseID, j.Attempt)
	run, err := podmanRun(h, j, paths)
	if err != nil {
		return Unit{}, err
	}
	u := Unit{Name: paths.Unit, Properties: properties(h, j, paths, run), EnvPath: paths.Env, EnvFile: env, LogPath: paths.Log}
	if j.Stdio.Interactive() {
		u.LogPath = ""
	}
	return u, nil
}

// check refuses a host Render cannot trust and a job no host could run.
func check(h Host, j Spec) error {
	if !strings.HasPrefix(h.Podman, "/") {
		return fmt.Errorf("podman path %q is not absolute", h.Podman)
	}
	if h.Cgroup != 1 && h.Cgroup != 2 {
		return fmt.Errorf("cgroup version %d is neither 1 nor 2", h.Cgroup)
	}
	if !safeName(j.LeaseID) || !safeName(j.JobID) {
		return fmt.Errorf("%w: job and lease ids must be letters, digits and dashes", ErrUnrunnable)
	}
	if j.Attempt < 1 {
		return fmt.Errorf("%w: attempt %d", ErrUnrunnable, j.Attempt)
	}
	if err := runnerapi.CheckImage(j.Image); err != nil {
		return fmt.Errorf("%w: %v", ErrUnrunnable, err)
	}
	for i, a := range j.Command {
		if err := runnerapi.CheckArg(a); err != nil {
			return fmt.Errorf("%w: command[%d]: %v", ErrUnrunnable, i, err)
		}
	}
	if j.WorkingDir != "" {
		if err := runnerapi.CheckWorkingDir(j.WorkingDir); err != nil {
			return fmt.Errorf("%w: working directory: %v", ErrUnrunnable, err)
		}
	}
	if j.ScratchMiB < 0 {
		return fmt.Errorf("%w: scratch of %d MiB", ErrUnrunnable, j.ScratchMiB)
	}
	if !j.Stdio.Valid() {
		// A mode from a newer server: never run it as something else.
		return fmt.Errorf("%w: stdio %q is not a mode this agent runs", ErrUnrunnable, j.Stdio)
	}
	return nil
}

// podmanRun is the `podman run` command line the unit starts: the job's
// labels, files, isolation and limits, its GPUs, then its image and command.
func podmanRun(h Host, j Spec, p Paths) ([]string, error) {
	// --init: a payload that is PID 1 gets no default signal actions, so
	// without an init a plain `sleep` ignores podman stop's SIGTERM and a
	// cancel always waits out the grace period; catatonit forwards the
	// signal and reaps orphans.
	run := []string{h.Podman, "run", "-d", "--rm", "--replace", "--sdnotify=conmon", "--init",
		"--name", p.Container,
		"--label", LabelJob + "=" + j.JobID,
		"--label", LabelLease + "=" + j.LeaseID,
		"--label", LabelAttempt + "=" + strconv.Itoa(j.Attempt),
		"--env-file", p.Env,
	}
	switch j.Stdio {
	case runnerapi.StdioLogs:
		// A file of our own, not podman's store: it survives --rm.
		run = append(run, "--log-driver=k8s-file", "--log-opt", "path="+p.Log)
	case runnerapi.StdioTTY, runnerapi.StdioPipe:
		// An interactive job's bytes go to no file on this host (podman's
		// log driver none): only to a client attached through conmon.
		// -i keeps its stdin open for such a client (conmon holds it, as
		// -d detaches podman run from its own); -t gives it a
		// pseudo-terminal. (podman run warns, in the start log, that its
		// own stdin is no terminal: it need not be.)
		run = append(run, "--log-driver=none", "--interactive")
		if j.Stdio == runnerapi.StdioTTY {
			run = append(run, "--tty")
		}
	}
	switch h.Cgroup {
	case 2:
		// The container gets a cgroup of its own inside the unit's, which
		// the unit delegates (properties).
		run = append(run, "--cgroups=split")
	case 1:
		// split needs a writable cgroup tree that rootless v1 does not
		// have (podman exits 126); conmon stays in the unit's cgroup.
		run = append(run, "--cgroups=no-conmon")
	}
	switch {
	case !j.Network:
		run = append(run, "--network=none")
	case h.Network == "":
		return nil, fmt.Errorf("%w: the job asks for a network and this host's podman has neither pasta nor slirp4netns", ErrUnrunnable)
	default:
		run = append(run, "--network="+h.Network)
	}
	if j.WorkingDir != "" {
		run = append(run, "--workdir="+j.WorkingDir)
	}
	if (j.Inputs || j.Outputs) && (p.Data == "" || strings.ContainsAny(p.Data, ",=")) {
		return nil, fmt.Errorf("%w: the job has inputs or outputs and this host has no data directory podman can mount (%q)", ErrUnrunnable, p.Data)
	}
	if j.Inputs {
		run = append(run, "--mount=type=bind,source="+p.Inputs+",destination="+runnerapi.InputsDir+",ro=true")
	}
	if j.Outputs {
		run = append(run, "--mount=type=bind,source="+p.Outputs+",destination="+runnerapi.OutputsDir)
	}
	if j.ScratchMiB > 0 {
		// The kernel bounds a tmpfs: a write past its size fails (ENOSPC).
		run = append(run, fmt.Sprintf("--mount=type=tmpfs,destination=/scratch,tmpfs-size=%dm,tmpfs-mode=1777", j.ScratchMiB))
	}
	if j.MemoryMiB > 0 && h.Enforce.Memory {
		// No swap beyond the claim: a job over it is OOM-killed, not slowed.
		m := strconv.FormatInt(j.MemoryMiB, 10) + "m"
		run = append(run, "--memory="+m, "--memory-swap="+m)
	}
	if j.Cores > 0 && h.Enforce.CPU {
		run = append(run, "--cpus="+strconv.FormatFloat(j.Cores, 'f', -1, 64))
	}
	if h.Enforce.Pids {
		run = append(run, "--pids-limit="+strconv.Itoa(pidsLimit(j.Cores)))
	}
	for _, uuid := range j.GPUs {
		dev := "nvidia.com/gpu=" + uuid
		if !slices.Contains(h.CDIDevices, dev) {
			return nil, fmt.Errorf("%w: GPU %s has no CDI device (nvidia-ctk cdi generate --device-name-strategy=uuid makes one)", ErrUnrunnable, uuid)
		}
		run = append(run, "--device", dev)
	}
	run = append(run, j.Image)
	return append(run, j.Command...), nil
}

// properties are the transient unit's: how systemd follows podman, starts
// run, stops and cleans up after the container, and bounds its run time.
func properties(h Host, j Spec, p Paths, run []string) []Property {
	props := []Property{
		{"Description", fmt.Sprintf("runmesh job %s attempt %d", j.JobID, j.Attempt)},
		{"Type", "notify"},
		// conmon, not podman, sends READY=1 and MAINPID.
		{"NotifyAccess", "all"},
		// SIGTERM to podman, then ExecStop stops the container cleanly;
		// control-group would SIGKILL conmon and strand the container.
		{"KillMode", "mixed"},
		// An ended unit stays (active, exited) until the agent has read
		// its result: without this systemd unloads a unit that exited 0
		// at once, and a restarted agent could not tell it had run.
		{"RemainAfterExit", true},
		{"Environment", []string{"PODMAN_SYSTEMD_UNIT=" + p.Unit}},
		{"TimeoutStartUSec", uint64(startTimeout.Microseconds())},
		{"TimeoutStopUSec", uint64(stopTimeout.Microseconds())},
		// podman's own complaints (a working directory the image lacks,
		// a runtime that refuses) say why a start failed; the agent reads
		// them there, and removes the file once the unit is forgotten.
		{"StandardErrorFileToAppend", p.StartLog},
	}
	if h.Cgroup == 2 {
		// --cgroups=split makes the container's cgroup inside the unit's.
		props = append(props, Property{"Delegate", true})
	}
	props = append(props,
		// systemd expands $NAME and ${NAME} in Exec lines from its own
		// environment: the job's command must reach podman as written.
		Property{"ExecStart", []Exec{{Argv: escapeDollars(run)}}},
		Property{"ExecStop", []Exec{{Argv: []string{h.Podman, "stop", "--ignore", "-t", strconv.Itoa(stopGrace), p.Container}}}},
		Property{"ExecStopPost", []Exec{
			{Argv: []string{h.Podman, "rm", "-f", "--ignore", p.Container}},
			{Argv: []string{"/bin/rm", "-f", p.Env}},
		}},
	)
	if j.WallClockSeconds > 0 {
		props = append(props, Property{"RuntimeMaxUSec", uint64(j.WallClockSeconds) * uint64(time.Second/time.Microsecond)})
	}
	return props
}

// escapeDollars doubles every $, which systemd reads back as one.
func escapeDollars(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

// pidsLimit bounds a job's processes: generous for real work, fatal to a
// fork bomb.
func pidsLimit(cores float64) int {
	return 4096 + 1024*int(math.Ceil(cores))
}

// envFile renders env in podman's --env-file format, one NAME=value a line,
// sorted so that the file is the same for the same job. The format has no
// escapes, and podman 5 reads a quoted value as quoted where podman 4 keeps
// the quotes, so a value that starts with a quote or holds a line break is
// refused rather than passed as something else.
func envFile(env map[string]string) ([]byte, error) {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		if !runnerapi.ValidEnvName(k) {
			return nil, fmt.Errorf("%w: environment name %q", ErrUnrunnable, k)
		}
		v := env[k]
		if err := runnerapi.CheckEnvValue(v); err != nil {
			return nil, fmt.Errorf("%w: the value of %s %v", ErrUnrunnable, k, err)
		}
		b.WriteString(k + "=" + v + "\n")
	}
	return []byte(b.String()), nil
}

func safeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
