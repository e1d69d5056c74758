// Package runtime is a job's life on this host: from a lease the worker
// holds to its end. A job's image is made local, its inputs are fetched,
// and it is started as a transient unit of the runmesh user's systemd
// manager whose process is `podman run --sdnotify=conmon` (Render turns a
// Spec into that unit); its output is sent as it grows; when it ends, how
// it ended becomes a result, its outputs are uploaded, and what it left on
// the host goes (End).
//
// systemd owns the job, so a unit outlives the agent that started it: a
// restarted agent finds it again by name (Survivors), adopts it if the
// server still wants it, and follows it as before. Everything else the
// agent asks podman (pulls, image inspects, the survivor check's container
// list, the events that say a job's container died) goes through podman's
// bindings to the user's podman service (Local). A job's inputs and
// outputs move through presigned URLs, exactly as given (Mover).
//
// The runtime holds no lease: the worker does, and tells a job when the
// server cancelled it or took its lease back; the worker reports the
// result.
package runtime

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// System is the host side of a job's life: the user's systemd manager,
// which runs each job's unit, and its podman. Local is the one on a host.
type System interface {
	Host() Host
	EnsureImage(ctx context.Context, image string, progress io.Writer) (string, error)
	Start(ctx context.Context, spec Spec) (Unit, error)
	Status(ctx context.Context, unit string) (Status, error)
	Stop(ctx context.Context, unit string) error
	Forget(ctx context.Context, unit string) error
	Survivors(ctx context.Context) ([]Survivor, error)
	Containers(ctx context.Context) ([]Container, error)
	RemoveContainer(ctx context.Context, name string) error
	ContainerEvents(ctx context.Context, fn func(ContainerEvent)) error
}

// Conn is what a job's life needs of the control plane: its output, sent
// as it grows. A refusal carries the runner API's stable code: errors.As
// finds a *runnerapi.ErrorBody in it.
type Conn interface {
	UploadLog(ctx context.Context, leaseID string, chunk runnerapi.LogUpload) error
}

// Runtime runs the jobs of leases on this host. Set the fields before its
// first job.
type Runtime struct {
	System System
	Conn   Conn
	// Dir keeps a record of each job (its lease, its GPUs, how far its
	// output was sent) for the agent after a restart. No environment
	// values: they can be secrets.
	Dir string
	Log *slog.Logger
	// Data moves jobs' inputs and outputs (its zero value: the defaults).
	Data Mover
	// Poll is how often a running job's output is sent (default 1 s).
	Poll time.Duration
	// Recheck is how often a running job's unit is read when podman said
	// nothing of its container (default 5 s): podman's events say when a
	// container died, and the unit is read then.
	Recheck time.Duration
	// MaxLocalOutput bounds a job's output file on this host once the
	// server takes no more of it (default 256 MiB): past that the file is
	// emptied, so that a job writing without end cannot fill the disk.
	MaxLocalOutput int64

	initOnce sync.Once
	mu       sync.Mutex
	// local: images seen on this host, and when.
	local map[string]time.Time
	// jobs are the jobs podman's events wake, by lease id: one attempt at
	// a time, the latest taken or followed.
	jobs      map[string]*Job
	watchOnce sync.Once
}

func (r *Runtime) init() {
	r.initOnce.Do(func() {
		r.local = map[string]time.Time{}
		r.jobs = map[string]*Job{}
		if r.Poll == 0 {
			r.Poll = time.Second
		}
		if r.Recheck == 0 {
			r.Recheck = 5 * time.Second
		}
	})
}

// Host is what the system renders units for.
func (r *Runtime) Host() Host { return r.System.Host() }

// register makes j the job of its lease that podman's events wake, unless
// a later attempt of the lease already is.
func (r *Runtime) register(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.jobs[j.lease.LeaseID]; old == nil || old.lease.Attempt <= j.lease.Attempt {
		r.jobs[j.lease.LeaseID] = j
	}
}

func (r *Runtime) unregister(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[j.lease.LeaseID] == j {
		delete(r.jobs, j.lease.LeaseID)
	}
}
