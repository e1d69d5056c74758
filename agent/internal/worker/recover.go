package worker

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// BootIDFile is where Linux keeps this boot's id.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// Recover is the survivor check, run once after every start and before
// any work is asked for. It lists the job units and the lease-labelled
// containers an earlier agent left, asks the server about each unit's lease
// (beat sends a heartbeat reporting them), adopts those answered CONTINUE
// or CANCEL, stops the rest, and looks again. The proof it returns (and
// the heartbeats carry until the server records it) claims the runner
// isolated only when the last look found nothing but adopted jobs.
func (w *Worker) Recover(ctx context.Context, beat func(context.Context) error) (runnerapi.RecoveryProof, error) {
	w.init()
	proof := runnerapi.RecoveryProof{AgentInstance: w.instance, BootID: bootID()}
	units, found, err := w.holdSurvivors(ctx)
	if err != nil {
		return proof, err
	}
	proof.SurvivorsFound = found
	// Ask the server. Units of an older attempt than the one held are not
	// reported: the second look stops them.
	if units > 0 {
		if err := w.askAbout(ctx, beat); err != nil {
			return proof, err
		}
	}
	adopted := w.keepAnswered()
	proof.Adopted = len(adopted)

	// Stop everything not adopted, then look once more: only what that
	// look finds counts.
	if _, err := w.Runtime.Strays(ctx, true, w.holds); err != nil {
		return proof, err
	}
	proof.SurvivorsChecked = true
	strays, err := w.Runtime.Strays(ctx, false, w.holds)
	if err != nil {
		return proof, err
	}
	proof.Isolated = len(strays) == 0
	if !proof.Isolated {
		w.Log.Error("survivor check: jobs still run that this agent does not follow", "strays", strays)
	}
	w.Runtime.ForgetRecords(w.jobs())
	w.Log.Info("survivor check", "survivors_found", proof.SurvivorsFound, "adopted", proof.Adopted, "isolated", proof.Isolated, "boot_id", proof.BootID)
	w.mu.Lock()
	w.proof, w.recorded = &proof, false
	w.mu.Unlock()
	w.Runtime.Watch(ctx)
	w.followAdopted(ctx, adopted)
	return proof, nil
}

// holdSurvivors has the runtime list the job units and lease containers
// left from before, and holds the newest attempt of each unit's lease, for
// the server to answer. It returns how many units it listed and how many
// attempts, units and containers together, it found.
func (w *Worker) holdSurvivors(ctx context.Context) (units, found int, err error) {
	jobs, found, err := w.Runtime.Survivors(ctx)
	if err != nil {
		return 0, 0, err
	}
	w.mu.Lock()
	for _, j := range jobs {
		l := j.Lease()
		if old := w.held[l.LeaseID]; old == nil || old.lease.Attempt < l.Attempt {
			w.held[l.LeaseID] = newHeld(j, runnerapi.PhaseRunning)
		}
	}
	w.mu.Unlock()
	return len(jobs), found, nil
}

// askAbout heartbeats, reporting the jobs held, until the server has
// answered each of them.
func (w *Worker) askAbout(ctx context.Context, beat func(context.Context) error) error {
	for backoff := time.Second; ; backoff = min(2*backoff, 15*time.Second) {
		err := beat(ctx)
		if err == nil && w.allAnswered() {
			return nil
		}
		w.Log.Warn("survivor check: asking the server about the jobs found", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// keepAnswered drops the held jobs the server did not answer, or answered
// GONE, and returns the rest: the jobs adopted.
func (w *Worker) keepAnswered() []*held {
	var adopted []*held
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, j := range w.held {
		if j.job.Lost() || !j.answered {
			delete(w.held, id)
			continue
		}
		adopted = append(adopted, j)
	}
	return adopted
}

// followAdopted follows each adopted job that nothing follows yet: a check
// run again (the first found the runner not isolated) finds the jobs it
// adopted already followed.
func (w *Worker) followAdopted(ctx context.Context, adopted []*held) {
	for _, j := range adopted {
		w.mu.Lock()
		followed := j.followed
		j.followed = true
		w.mu.Unlock()
		if followed {
			continue
		}
		w.Log.Info("adopted a job from before this start", "lease_id", j.lease.LeaseID, "attempt", j.lease.Attempt, "unit", j.job.Unit())
		go w.follow(ctx, j)
	}
}

func (w *Worker) allAnswered() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.held {
		if !j.answered {
			return false
		}
	}
	return true
}

func (w *Worker) holds(lease string, attempt int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.held[lease]
	return j != nil && j.lease.Attempt == attempt
}

// jobs are the held leases' jobs.
func (w *Worker) jobs() []*runtime.Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*runtime.Job, 0, len(w.held))
	for _, j := range w.held {
		out = append(out, j.job)
	}
	return out
}

func bootID() string {
	b, err := os.ReadFile(BootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
