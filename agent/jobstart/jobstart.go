// Package jobstart starts job containers exactly as the agent does (a
// transient unit in the user's systemd manager running `podman run
// --sdnotify=conmon`), without a control plane, so that what it costs can
// be measured (runmesh-bench start). The agent's runtime itself stays in
// agent/internal.
package jobstart

import (
	"context"
	"os"
	"path/filepath"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

// Starter starts jobs in the current user's systemd manager.
type Starter struct {
	rt    *runtime.Local
	facts runtime.PodmanFacts
}

// Open asks the podman at path what its containers get and connects to the
// user's systemd manager. Environment files go where the agent keeps them
// (under XDG_RUNTIME_DIR), output to logDir.
func Open(ctx context.Context, podman, logDir string) (*Starter, error) {
	facts, err := runtime.ProbePodman(ctx, podman)
	if err != nil {
		return nil, err
	}
	host := runtime.NewHost(podman, facts, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "runmesh"), logDir)
	rt, err := runtime.Connect(ctx, host, filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "podman", "podman.sock"))
	if err != nil {
		return nil, err
	}
	return &Starter{rt: rt, facts: facts}, nil
}

// CgroupVersion is what podman reported: "v1" or "v2".
func (s *Starter) CgroupVersion() string { return s.facts.CgroupVersion }

// LogDir is where the jobs' output goes.
func (s *Starter) LogDir() string { return s.rt.Host().LogDir }

// Close drops the connection to the systemd manager.
func (s *Starter) Close() { s.rt.Close() }

// Job is one job to start, as one attempt of a lease named ID.
type Job struct {
	ID               string // a UUID: it names the unit and its container
	Image            string
	Command          []string
	Cores            float64
	WallClockSeconds int
}

// Started is a job whose container is running.
type Started struct {
	s       *Starter
	unit    string
	logPath string
}

// Start starts job's unit and returns once its container runs (conmon said
// READY), as the agent's own start does.
func (s *Starter) Start(ctx context.Context, job Job) (*Started, error) {
	u, err := s.rt.Start(ctx, runtime.Spec{
		JobID: job.ID, LeaseID: job.ID, Attempt: 1, Image: job.Image, Command: job.Command,
		Cores: job.Cores, WallClockSeconds: job.WallClockSeconds,
	})
	if err != nil {
		return nil, err
	}
	return &Started{s: s, unit: u.Name, logPath: u.LogPath}, nil
}

// Remove stops the job's unit, lets systemd forget it and removes its
// output.
func (j *Started) Remove(ctx context.Context) error {
	if err := j.s.rt.Stop(ctx, j.unit); err != nil {
		return err
	}
	_ = j.s.rt.Forget(ctx, j.unit)
	os.Remove(j.logPath)
	return nil
}
