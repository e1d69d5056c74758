// Package runtimetest is a runtime.System in memory: the user's systemd
// manager and podman, for the tests of what runs jobs through them where
// neither can run. Units start as runtime.Render renders them and run
// until a test ends them.
package runtimetest

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/runmesh/runmesh/agent/internal/runtime"
)

type unit struct {
	lease   string
	attempt int
	status  runtime.Status
}

// System is a host's job units and containers. Set its exported fields
// before it is used.
type System struct {
	// Images are the digests EnsureImage gives, and the errors it refuses
	// with (by reference); any other image is had as sha256:0123.
	Images map[string]string
	// Progress is what EnsureImage writes of a pull (by reference), before
	// it waits for Release.
	Progress map[string]string
	Release  chan struct{}
	// Events, when made, carries what ContainerEvents gives.
	Events chan runtime.ContainerEvent

	mu         sync.Mutex
	host       runtime.Host
	units      map[string]*unit
	containers map[string]runtime.Container
	stuck      map[string]bool // containers that refuse to go
	reads      map[string]int  // Status calls, by unit
	pulls      map[string]int  // EnsureImage calls, by image
}

// New is a system whose environment, log and data directories are the
// test's, apart as on a host.
func New(t testing.TB) *System {
	return &System{
		host:  runtime.Host{Podman: "/usr/bin/podman", Cgroup: 2, EnvDir: t.TempDir(), LogDir: t.TempDir(), DataDir: t.TempDir()},
		units: map[string]*unit{}, containers: map[string]runtime.Container{}, stuck: map[string]bool{}, reads: map[string]int{},
		pulls: map[string]int{},
	}
}

// AddCDIDevices gives the host CDI devices (nvidia.com/gpu=UUID for a
// GPU).
func (s *System) AddCDIDevices(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.host.CDIDevices = append(s.host.CDIDevices, names...)
}

// AddUnit makes a running unit, and its container, for a lease's attempt,
// as an earlier agent would have left it, and returns the unit's name.
func (s *System) AddUnit(lease string, attempt int) string {
	p := s.host.Paths(lease, attempt)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.units[p.Unit] = &unit{lease: lease, attempt: attempt}
	s.containers[p.Container] = runtime.Container{Name: p.Container, LeaseID: lease, Attempt: attempt, State: "running"}
	return p.Unit
}

// AddContainer makes a container without a unit; stuck, it refuses to be
// removed.
func (s *System) AddContainer(c runtime.Container, stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[c.Name] = c
	s.stuck[c.Name] = stuck
}

// End ends a unit's job with an exit code; its container goes.
func (s *System) End(unit string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(unit, code)
}

func (s *System) endLocked(name string, code int) {
	u := s.units[name]
	u.status = runtime.Status{Ended: true, ExitCode: &code, Result: "success"}
	delete(s.containers, s.host.Paths(u.lease, u.attempt).Container)
}

// ReadsOf is how often a unit's status was read.
func (s *System) ReadsOf(unit string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[unit]
}

// Pulls is how often an image was asked for.
func (s *System) Pulls(image string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pulls[image]
}

// Has reports whether systemd holds the unit.
func (s *System) Has(unit string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.units[unit] != nil
}

// HasContainer reports whether podman has the container.
func (s *System) HasContainer(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.containers[name]
	return ok
}

func (s *System) Host() runtime.Host {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.host
}

func (s *System) EnsureImage(_ context.Context, image string, progress io.Writer) (string, error) {
	if p := s.Progress[image]; p != "" && progress != nil {
		io.WriteString(progress, p)
		<-s.Release
	}
	s.mu.Lock()
	s.pulls[image]++
	s.mu.Unlock()
	switch d := s.Images[image]; {
	case d == "":
		return "sha256:0123", nil
	case strings.HasPrefix(d, "sha256:"):
		return d, nil
	default:
		return "", errors.New(d)
	}
}

func (s *System) Start(_ context.Context, spec runtime.Spec) (runtime.Unit, error) {
	u, err := runtime.Render(s.Host(), spec)
	if err != nil {
		return u, err
	}
	s.AddUnit(spec.LeaseID, spec.Attempt)
	return u, nil
}

func (s *System) Status(_ context.Context, unit string) (runtime.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[unit]++
	u := s.units[unit]
	if u == nil {
		return runtime.Status{}, runtime.ErrNoUnit
	}
	return u.status, nil
}

// Stop ends a running unit's job as podman stop's SIGTERM would.
func (s *System) Stop(_ context.Context, unit string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.units[unit]; u != nil && !u.status.Ended {
		s.endLocked(unit, 143)
	}
	return nil
}

func (s *System) Forget(ctx context.Context, unit string) error {
	s.Stop(ctx, unit)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.units, unit)
	return nil
}

func (s *System) Survivors(context.Context) ([]runtime.Survivor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runtime.Survivor
	for name, u := range s.units {
		out = append(out, runtime.Survivor{Unit: name, LeaseID: u.lease, Attempt: u.attempt})
	}
	return out, nil
}

func (s *System) Containers(context.Context) ([]runtime.Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runtime.Container
	for _, c := range s.containers {
		out = append(out, c)
	}
	return out, nil
}

func (s *System) RemoveContainer(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stuck[name] {
		return errors.New("device or resource busy")
	}
	delete(s.containers, name)
	return nil
}

// ContainerEvents gives the events sent on Events (none unless a test
// makes the channel).
func (s *System) ContainerEvents(ctx context.Context, fn func(runtime.ContainerEvent)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-s.Events:
			fn(e)
		}
	}
}
