// Package worker holds the runner's leases. It asks the control plane for
// work that fits what is free, has the runtime run each lease's job,
// reports the leases' phases through the heartbeat and obeys its answers
// (CONTINUE, CANCEL, GONE), and reports how each attempt ended.
//
// After every start of the agent, before it asks for work, it finds the
// jobs an earlier agent left (Recover): the units outlive the agent, so a
// restart never kills a job, and a job the server no longer wants is
// stopped before anything new runs beside it.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// API is the part of the runner API the worker uses.
type API interface {
	Lease(ctx context.Context, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error)
	Result(ctx context.Context, leaseID string, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error)
}

// Worker holds leases. Set the fields, then Recover, then Run.
type Worker struct {
	API API
	// Runtime runs the leases' jobs on this host.
	Runtime *runtime.Runtime
	// Sessions dials the streams of people's sessions on running jobs
	// (nil: the agent takes none); Runtime.System must be a SessionHost.
	Sessions Sessions
	// Kinds are the job kinds this runner takes.
	Kinds []string
	// Capacity is the latest measurement (false before the first).
	Capacity func() (runnerapi.Capacity, bool)
	Version  string
	Log      *slog.Logger
	// Kick, if set, asks for a heartbeat now (a job started running).
	Kick func()

	instance string
	draining atomic.Bool
	mu       sync.Mutex
	held     map[string]*held // by lease id: one attempt at a time
	proof    *runnerapi.RecoveryProof
	recorded bool
	changed  chan struct{} // wakes Run: a job ended, the proof was recorded, a drain
	// stopAsking cancels the request for work in flight.
	stopAsking context.CancelFunc
	// asking: a request for work is in flight, or its leases are being
	// taken; the agent is not idle then.
	asking bool
	// drained is closed once the worker drains and holds nothing (Drained).
	drained     chan struct{}
	drainedOnce sync.Once
	images      poolImages
}

// MaxJobs bounds the jobs one runner holds at once.
const MaxJobs = 64

func (w *Worker) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held != nil {
		return
	}
	w.held = map[string]*held{}
	w.changed = make(chan struct{}, 1)
	w.drained = make(chan struct{})
	w.images = poolImages{states: map[string]runnerapi.ImageState{}, wake: make(chan struct{}, 1)}
	w.instance = uuid.NewString()
	if w.Kick == nil {
		w.Kick = func() {}
	}
}

// Instance is this agent start's id, named by its recovery proof and its
// requests for work.
func (w *Worker) Instance() string {
	w.init()
	return w.instance
}

func (w *Worker) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Held is what the next heartbeat reports: every lease and its phase.
func (w *Worker) Held() []runnerapi.HeldLease {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]runnerapi.HeldLease, 0, len(w.held))
	for _, j := range w.held {
		out = append(out, runnerapi.HeldLease{LeaseID: j.lease.LeaseID, Attempt: j.lease.Attempt, Phase: j.phase})
	}
	slices.SortFunc(out, func(a, b runnerapi.HeldLease) int { return strings.Compare(a.LeaseID, b.LeaseID) })
	return out
}

// GPUHolder is the job holding a GPU, as the agent's metrics label it:
// its organisation and pool, its id, and its lease (the id and the
// attempt: another attempt of the job is another lease).
type GPUHolder struct{ Organisation, Pool, Job, Lease string }

// GPUHolders maps each GPU a held job has (by UUID) to that job.
func (w *Worker) GPUHolders() map[string]GPUHolder {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]GPUHolder{}
	for _, j := range w.held {
		l := j.lease
		for _, g := range j.gpus {
			out[g] = GPUHolder{Organisation: l.Organisation, Pool: l.Pool, Job: l.LeaseID, Lease: l.LeaseID + "/" + strconv.Itoa(l.Attempt)}
		}
	}
	return out
}

// Recovery is the proof the next heartbeat carries: the survivor check's,
// until the server says it recorded it.
func (w *Worker) Recovery() *runnerapi.RecoveryProof {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.recorded {
		return nil
	}
	return w.proof
}

// Ready reports whether the server has this start's proof, and it proved
// the runner isolated: the agent may take work.
func (w *Worker) Ready() bool {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recorded && w.proof != nil && w.proof.Isolated
}

// Answer applies a heartbeat's answer to the leases it reported.
func (w *Worker) Answer(resp runnerapi.HeartbeatResponse, sent *runnerapi.RecoveryProof) {
	w.PoolImages(resp.PoolImages)
	w.mu.Lock()
	defer w.mu.Unlock()
	if sent != nil && sent == w.proof && resp.RecoveryRecorded {
		w.recorded = true
		w.signal()
	}
	for _, a := range resp.Leases {
		j := w.held[a.LeaseID]
		if j == nil || j.lease.Attempt != a.Attempt {
			continue
		}
		j.answered = true
		switch a.Action {
		case runnerapi.LeaseCancel:
			j.job.Cancel()
		case runnerapi.LeaseGone:
			j.job.LeaseLost()
		}
	}
}

// Drain stops asking for work; held jobs run to their end.
func (w *Worker) Drain() {
	w.init()
	w.draining.Store(true)
	w.mu.Lock()
	if w.stopAsking != nil {
		w.stopAsking()
	}
	w.mu.Unlock()
	w.signal()
	w.noteIdle()
}

// Drained is closed once the worker has been drained and holds nothing,
// nor asks for anything: the agent may exit.
func (w *Worker) Drained() <-chan struct{} {
	w.init()
	return w.drained
}

// noteIdle closes Drained if the worker is draining and idle. Called after
// each change that can leave it idle: a drain, a job dropped, a request for
// work ended.
func (w *Worker) noteIdle() {
	if w.draining.Load() && w.Idle() {
		w.drainedOnce.Do(func() { close(w.drained) })
	}
}

// Idle reports whether no lease is held, and none is being asked for or
// taken.
func (w *Worker) Idle() bool {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held) == 0 && !w.asking
}

// Run asks for work while there is room, until ctx ends or Drain.
func (w *Worker) Run(ctx context.Context) {
	w.init()
	w.Runtime.Watch(ctx)
	go w.keepImages(ctx)
	backoff := time.Second
	for ctx.Err() == nil && !w.draining.Load() {
		// The pool's images are tried before the first work is asked for;
		// the request is made after, so that it names as unavailable only
		// images that are (an image once pulled stays pulled).
		tried := w.imagesTried()
		req, room := w.request()
		if !room || !w.Ready() || !tried {
			select {
			case <-ctx.Done():
			case <-w.changed:
			case <-time.After(5 * time.Second):
			}
			continue
		}
		// A drain cancels the wait for work. Leases granted before it
		// took effect are ours and run. Those the server grants as the
		// request is cancelled it gives back to the queue itself, when it
		// sees the request end before its answer goes out; an answer lost
		// after that expires with its lease.
		lctx, cancel := context.WithCancel(ctx)
		w.mu.Lock()
		w.stopAsking, w.asking = cancel, true
		w.mu.Unlock()
		if w.draining.Load() {
			cancel()
		}
		leases, err := w.API.Lease(lctx, req)
		cancel()
		for _, l := range leases {
			w.start(ctx, l)
		}
		w.mu.Lock()
		w.asking = false
		w.mu.Unlock()
		w.noteIdle()
		if err != nil {
			if ctx.Err() != nil || w.draining.Load() {
				return
			}
			if errors.Is(err, context.Canceled) {
				continue // withdrawn by us (the pool's images changed): ask again
			}
			if runnerclient.Code(err) == runnerapi.CodeRecoveryRequired {
				// The server lost our proof (or never had it): send it again.
				w.mu.Lock()
				w.recorded = false
				w.mu.Unlock()
				w.Kick()
			}
			w.Log.Warn("asking for work failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// request is what to ask for: the kinds, the largest job, what is free.
// There is no room while a job of unknown claim runs.
func (w *Worker) request() (runnerapi.LeaseRequest, bool) {
	c, ok := w.Capacity()
	if !ok {
		return runnerapi.LeaseRequest{}, false
	}
	total := runnerapi.Resources{Cores: c.Host.Cores, MemoryMiB: c.Host.MemoryMiB, GPUs: len(healthyGPUs(c))}
	free := total
	w.mu.Lock()
	n, unknown := len(w.held), false
	for _, j := range w.held {
		free.Cores -= j.lease.Claim.Cores
		free.MemoryMiB -= j.lease.Claim.MemoryMiB
		free.GPUs -= len(j.gpus)
		unknown = unknown || j.job.UnknownClaim()
	}
	w.mu.Unlock()
	free.Cores, free.MemoryMiB, free.GPUs = max(free.Cores, 0), max(free.MemoryMiB, 0), max(free.GPUs, 0)
	if n >= MaxJobs || free.Cores < 0.001 || unknown {
		return runnerapi.LeaseRequest{}, false
	}
	return runnerapi.LeaseRequest{
		Kinds: w.Kinds, Largest: total, Free: free, Max: min(4, MaxJobs-n), WaitSeconds: 30, AgentInstance: w.instance,
		UnavailableImages: w.unavailableImages(), Stdio: runtime.StdioModes,
	}, true
}

func healthyGPUs(c runnerapi.Capacity) []string {
	var out []string
	for _, g := range c.GPUs {
		if g.Healthy {
			out = append(out, g.UUID)
		}
	}
	return out
}

// freeGPUs picks n healthy GPUs no held job has.
func (w *Worker) freeGPUs(n int) []string {
	if n == 0 {
		return nil
	}
	c, _ := w.Capacity()
	taken := map[string]bool{}
	w.mu.Lock()
	for _, j := range w.held {
		if j.job.UnknownClaim() {
			w.mu.Unlock()
			return nil // any GPU may be its
		}
		for _, g := range j.gpus {
			taken[g] = true
		}
	}
	w.mu.Unlock()
	var out []string
	for _, g := range healthyGPUs(c) {
		if !taken[g] && len(out) < n {
			out = append(out, g)
		}
	}
	if len(out) < n {
		return nil
	}
	return out
}

// drop lets a lease go once its job has ended.
func (w *Worker) drop(j *held) {
	w.mu.Lock()
	if w.held[j.lease.LeaseID] == j {
		delete(w.held, j.lease.LeaseID)
	}
	w.mu.Unlock()
	w.signal()
	w.noteIdle()
}
