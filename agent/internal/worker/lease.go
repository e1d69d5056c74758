package worker

import (
	"context"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// held is one lease held at one attempt, and its job.
type held struct {
	lease runnerapi.Lease // without Env
	gpus  []string
	job   *runtime.Job
	// Set under Worker.mu.
	phase    string
	answered bool // the server answered for it since the agent started
	followed bool // a follow goroutine owns it
}

func newHeld(j *runtime.Job, phase string) *held {
	return &held{lease: j.Lease(), gpus: j.GPUs(), job: j, phase: phase}
}

// start takes a new lease: it is held (and heartbeated) from here on.
func (w *Worker) start(ctx context.Context, l runnerapi.Lease) {
	gpus := w.freeGPUs(l.Claim.GPUs)
	j := newHeld(w.Runtime.Take(l, gpus), runnerapi.PhaseStarting)
	w.mu.Lock()
	if old := w.held[l.LeaseID]; old != nil {
		// The server took the lease back (we missed the GONE) and gave a
		// later attempt to us again: the older one must stop.
		old.job.LeaseLost()
	}
	w.held[l.LeaseID] = j
	w.mu.Unlock()
	log := w.Log.With("lease_id", l.LeaseID, "attempt", l.Attempt)
	if l.Claim.GPUs > 0 && j.gpus == nil {
		go w.finish(ctx, j, runtime.GiveBack("the GPUs the lease needs are no longer free", true))
		return
	}
	if err := j.job.Save(); err != nil {
		go w.finish(ctx, j, runtime.GiveBack("the agent could not write its lease record: "+err.Error(), true))
		return
	}
	log.Info("lease taken", "image", l.Image, "cores", l.Claim.Cores, "memory_mib", l.Claim.MemoryMiB, "gpus", j.gpus)
	go func() {
		res, ok := j.job.Launch(ctx, l.Env)
		if !ok {
			w.finish(ctx, j, res)
			return
		}
		w.mu.Lock()
		j.phase = runnerapi.PhaseRunning
		w.mu.Unlock()
		w.Kick()
		w.follow(ctx, j)
	}()
}

// follow has the runtime follow a started (or adopted) job to its end,
// then reports it, or lets it go.
func (w *Worker) follow(ctx context.Context, j *held) {
	// While the job runs, a stream stands for people's sessions on it.
	sctx, stopSessions := context.WithCancel(ctx)
	go w.stand(sctx, j, w.holdTerminal(sctx, j))
	res, how := j.job.Follow(ctx)
	stopSessions()
	switch how {
	case runtime.Finished:
		w.finish(ctx, j, res)
	case runtime.Abandoned:
		w.end(ctx, j)
	}
	// Interrupted: the job stays on the host, for the next agent.
}

// malformed reports whether the server refused a report as wrong in
// itself: sending it again cannot change that.
func malformed(err error) bool {
	switch runnerclient.Code(err) {
	case runnerapi.CodeBadRequest, runnerapi.CodeTooLarge:
		return true
	}
	return false
}

// finish reports the attempt's result until the server has it (or says
// the attempt is no longer ours), then lets the job go.
func (w *Worker) finish(ctx context.Context, j *held, r runnerapi.ResultRequest) {
	r.Attempt = j.lease.Attempt
	if d := j.job.Digest(); d != "" {
		r.ImageDigest = &d
	}
	if w.Version != "" {
		v := w.Version
		r.RunnerVersion = &v
	}
	log := w.Log.With("lease_id", j.lease.LeaseID, "attempt", j.lease.Attempt)
	for backoff := time.Second; ; backoff = min(backoff*2, 30*time.Second) {
		resp, err := w.API.Result(ctx, j.lease.LeaseID, r)
		if err == nil {
			log.Info("result accepted", "state", resp.State, "exit_code", deref(r.ExitCode), "return_reason", deref(r.ReturnReason))
			break
		}
		if final(err) {
			log.Warn("result refused", "err", err)
			break
		}
		log.Warn("reporting the result failed", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			// The unit stays, ended: the next agent reports it.
			return
		case <-time.After(backoff):
		}
	}
	w.end(ctx, j)
}

// end has the runtime end the job, and lets its lease go.
func (w *Worker) end(ctx context.Context, j *held) {
	j.job.End(ctx)
	w.drop(j)
}

// final reports whether a refusal will never change: the attempt is no
// longer ours, or the report itself is wrong. Anything else (a server
// error, a proxy, a renewal under way, no network) is tried again: giving
// up would lose a result the job cannot produce twice.
func final(err error) bool {
	switch runnerclient.Code(err) {
	case runnerapi.CodeStaleAttempt, runnerapi.CodeNotFound:
		return true
	}
	return malformed(err)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
