package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// BootIDFile is where Linux keeps this boot's id.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

type leaseKey struct {
	lease   string
	attempt int
}

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
	if _, err := w.strays(ctx, true); err != nil {
		return proof, err
	}
	proof.SurvivorsChecked = true
	strays, err := w.strays(ctx, false)
	if err != nil {
		return proof, err
	}
	proof.Isolated = len(strays) == 0
	if !proof.Isolated {
		w.Log.Error("survivor check: jobs still run that this agent does not follow", "strays", strays)
	}
	w.forgetRecords()
	w.Log.Info("survivor check", "survivors_found", proof.SurvivorsFound, "adopted", proof.Adopted, "isolated", proof.Isolated, "boot_id", proof.BootID)
	w.mu.Lock()
	w.proof, w.recorded = &proof, false
	w.mu.Unlock()
	w.watchContainers(ctx)
	w.followAdopted(ctx, adopted)
	return proof, nil
}

// holdSurvivors lists the job units and lease containers left from before
// and holds the newest attempt of each unit's lease, for the server to
// answer. It returns how many units it listed and how many attempts, units
// and containers together, it found.
func (w *Worker) holdSurvivors(ctx context.Context) (units, found int, err error) {
	survivors, err := w.Runtime.Survivors(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("list job units: %w", err)
	}
	containers, err := w.Runtime.Containers(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("list job containers: %w", err)
	}
	seen := map[leaseKey]bool{}
	host := w.Runtime.Host()
	w.mu.Lock()
	for _, u := range survivors {
		seen[leaseKey{u.LeaseID, u.Attempt}] = true
		j := newJob(runnerapi.Lease{LeaseID: u.LeaseID, Attempt: u.Attempt}, host.Paths(u.LeaseID, u.Attempt), runnerapi.PhaseRunning)
		j.unit = u.Unit
		w.load(j)
		if old := w.held[u.LeaseID]; old == nil || old.lease.Attempt < u.Attempt {
			w.held[u.LeaseID] = j
		}
	}
	w.mu.Unlock()
	for _, c := range containers {
		seen[leaseKey{c.LeaseID, c.Attempt}] = true
	}
	return len(survivors), len(seen), nil
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
func (w *Worker) keepAnswered() []*job {
	var adopted []*job
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, j := range w.held {
		if j.gone || !j.answered {
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
func (w *Worker) followAdopted(ctx context.Context, adopted []*job) {
	for _, j := range adopted {
		w.mu.Lock()
		followed := j.followed
		j.followed = true
		w.mu.Unlock()
		if followed {
			continue
		}
		w.Log.Info("adopted a job from before this start", "lease_id", j.lease.LeaseID, "attempt", j.lease.Attempt, "unit", j.unit)
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

// strays lists the job units and lease containers that no held job owns;
// with stop, it also stops those units (and drops their output) and removes
// those containers, and lists what it could not.
func (w *Worker) strays(ctx context.Context, stop bool) ([]string, error) {
	var out []string
	units, err := w.Runtime.Survivors(ctx)
	if err != nil {
		return nil, fmt.Errorf("list job units: %w", err)
	}
	for _, u := range units {
		if w.holds(u.LeaseID, u.Attempt) {
			continue
		}
		if stop {
			w.Log.Info("survivor check: stopping a job the server no longer gives this runner", "unit", u.Unit)
			err := w.Runtime.Forget(ctx, u.Unit)
			if err == nil {
				os.Remove(w.Runtime.Host().Paths(u.LeaseID, u.Attempt).Log)
				continue
			}
			w.Log.Warn("stop", "unit", u.Unit, "err", err)
		}
		out = append(out, u.Unit)
	}
	containers, err := w.Runtime.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list job containers: %w", err)
	}
	for _, c := range containers {
		if w.holds(c.LeaseID, c.Attempt) {
			continue
		}
		if stop {
			w.Log.Info("survivor check: removing a job container without a followed unit", "container", c.Name)
			err := w.Runtime.RemoveContainer(ctx, c.Name)
			if err == nil {
				continue
			}
			w.Log.Warn("remove", "container", c.Name, "err", err)
		}
		out = append(out, c.Name)
	}
	return out, nil
}

// forgetRecords removes the lease records and environment files of leases
// no longer held: an agent that died between writing them and starting its
// unit leaves them, and no unit's ExecStopPost ever will. Environment files
// hold the jobs' secrets.
func (w *Worker) forgetRecords() {
	keep := map[string]bool{}
	w.mu.Lock()
	for _, j := range w.held {
		keep[w.recordPath(j.paths)] = true
		keep[j.paths.Env] = true
	}
	w.mu.Unlock()
	for _, dir := range []string{w.Dir, w.Runtime.Host().EnvDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if !keep[path] && strings.HasPrefix(e.Name(), runtime.UnitPrefix) {
				os.Remove(path)
			}
		}
	}
}

func bootID() string {
	b, err := os.ReadFile(BootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
