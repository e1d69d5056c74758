package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/runmesh/runmesh/agent/internal/capacity"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/internal/health"
	"github.com/runmesh/runmesh/runnerapi"
)

// newCollector measures this host: GPUs through NVML, the rest from
// /proc and cgroups; limits, from podman, go with every report. The
// collector's GPUs must be closed. It creates nothing: free disk is
// measured at the work directory or, before the first run made it, the
// nearest directory above it.
func newCollector(cfg Config, limits *runnerapi.LimitEnforcement) *capacity.Collector {
	return &capacity.Collector{
		Host: capacity.HostProbe{WorkDir: measuredAt(cfg.WorkDir)}, GPUs: capacity.NewGPUs(cfg.nvml()), Declared: cfg.Labels, Limits: limits,
	}
}

// podmanProbe is what podman said at start-up, asked once: it decides both
// the limits the agent reports and whether it could run jobs.
type podmanProbe struct {
	path  string
	facts runtime.PodmanFacts
	err   error
}

func probePodman(ctx context.Context, cfg Config) podmanProbe {
	// Every command that asks podman (run, enrol, capacity) asks it in the
	// same environment, so they report the same limits.
	userRuntimeDir()
	p := podmanProbe{path: cfg.Podman}
	if p.path == "" {
		if p.path, p.err = exec.LookPath("podman"); p.err != nil {
			p.err = errors.New("podman not found on PATH")
			return p
		}
	}
	p.facts, p.err = runtime.ProbePodman(ctx, p.path)
	return p
}

// limits says which limits hold for job containers; whatever podman could
// not show is reported as not enforced, with the reason.
func (p podmanProbe) limits() *runnerapi.LimitEnforcement {
	if p.err != nil {
		return &runnerapi.LimitEnforcement{Reason: runnerapi.Clip(p.err.Error(), 512)}
	}
	e := runtime.DetectEnforcement(p.facts)
	return &runnerapi.LimitEnforcement{Memory: e.Memory, CPU: e.CPU, Pids: e.Pids, Reason: runnerapi.Clip(e.Reason, 512)}
}

// openRuntime connects to the user's systemd manager when podman answers
// rootless, and says in cond whether the agent can run jobs. Without both
// the agent still heartbeats, takes no work, and cond says why.
func openRuntime(ctx context.Context, cfg Config, p podmanProbe, cond *health.Condition) *runtime.Local {
	rt, err := connectRuntime(ctx, cfg, p)
	if err != nil {
		cond.SetUnhealthy("cannot run jobs: " + err.Error())
		return nil
	}
	msg := fmt.Sprintf("rootless podman (cgroup %s) in the user's systemd manager", p.facts.CgroupVersion)
	if p.facts.EventLogger != "file" {
		// Jobs are still followed, every Recheck, not when they end.
		msg += fmt.Sprintf("; podman's events go to %q, which the agent may not read back: set events_logger = \"file\" "+
			"(the package's containers.conf.d/50-runmesh-events.conf)", p.facts.EventLogger)
	}
	cond.SetHealthy(msg)
	return rt
}

func connectRuntime(ctx context.Context, cfg Config, p podmanProbe) (*runtime.Local, error) {
	switch {
	case p.err != nil:
		return nil, p.err
	case !p.facts.Rootless:
		return nil, errors.New("podman is not rootless for this user (run the agent as its own unprivileged user)")
	case os.Getenv("XDG_RUNTIME_DIR") == "":
		return nil, errors.New("XDG_RUNTIME_DIR is not set and /run/user/UID does not exist: is lingering enabled for this user (loginctl enable-linger)?")
	}
	if err := ownDirs(cfg.WorkDir, filepath.Join(cfg.WorkDir, "logs"), filepath.Join(cfg.WorkDir, "data")); err != nil {
		return nil, err
	}
	host := runtime.NewHost(p.path, p.facts, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "runmesh"), filepath.Join(cfg.WorkDir, "logs"))
	host.DataDir = filepath.Join(cfg.WorkDir, "data")
	return runtime.Connect(ctx, host, cfg.podmanSocket())
}

// podmanSocket is where the user's podman service listens.
func (c Config) podmanSocket() string {
	if c.PodmanSocket != "" {
		return c.PodmanSocket
	}
	return filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "podman", "podman.sock")
}

// userRuntimeDir points XDG_RUNTIME_DIR at the lingering user's directory
// when the service manager did not set it: podman and the user's systemd
// manager are both found through it.
func userRuntimeDir() {
	if os.Getenv("XDG_RUNTIME_DIR") != "" {
		return
	}
	dir := fmt.Sprintf("/run/user/%d", os.Getuid())
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		os.Setenv("XDG_RUNTIME_DIR", dir)
	}
}
