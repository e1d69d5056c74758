package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/runmesh/runmesh/runnerapi"
)

// What an earlier agent left: the survivor check (the worker's Recover)
// finds it, adopts the jobs the server still wants, and has the rest
// stopped.

type leaseKey struct {
	lease   string
	attempt int
}

// Survivors lists the job units and the lease-labelled containers an
// earlier agent left. It returns a Job for each unit, as its record says
// (without a readable record, as the unit names it: UnknownClaim), and how
// many attempts, units and containers together, it found.
func (r *Runtime) Survivors(ctx context.Context) ([]*Job, int, error) {
	r.init()
	units, err := r.System.Survivors(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list job units: %w", err)
	}
	containers, err := r.System.Containers(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list job containers: %w", err)
	}
	seen := map[leaseKey]bool{}
	jobs := make([]*Job, 0, len(units))
	for _, u := range units {
		seen[leaseKey{u.LeaseID, u.Attempt}] = true
		j := r.newJob(runnerapi.Lease{LeaseID: u.LeaseID, Attempt: u.Attempt})
		j.unit = u.Unit
		j.load()
		jobs = append(jobs, j)
	}
	for _, c := range containers {
		seen[leaseKey{c.LeaseID, c.Attempt}] = true
	}
	return jobs, len(seen), nil
}

// Strays lists the job units and lease containers of attempts that holds
// says no one holds; with stop, it also stops those units (and drops their
// output) and removes those containers, and lists what it could not.
func (r *Runtime) Strays(ctx context.Context, stop bool, holds func(lease string, attempt int) bool) ([]string, error) {
	r.init()
	var out []string
	units, err := r.System.Survivors(ctx)
	if err != nil {
		return nil, fmt.Errorf("list job units: %w", err)
	}
	for _, u := range units {
		if holds(u.LeaseID, u.Attempt) {
			continue
		}
		if stop {
			r.Log.Info("survivor check: stopping a job the server no longer gives this runner", "unit", u.Unit)
			err := r.System.Forget(ctx, u.Unit)
			if err == nil {
				os.Remove(r.System.Host().Paths(u.LeaseID, u.Attempt).Log)
				continue
			}
			r.Log.Warn("stop", "unit", u.Unit, "err", err)
		}
		out = append(out, u.Unit)
	}
	containers, err := r.System.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list job containers: %w", err)
	}
	for _, c := range containers {
		if holds(c.LeaseID, c.Attempt) {
			continue
		}
		if stop {
			r.Log.Info("survivor check: removing a job container without a followed unit", "container", c.Name)
			err := r.System.RemoveContainer(ctx, c.Name)
			if err == nil {
				continue
			}
			r.Log.Warn("remove", "container", c.Name, "err", err)
		}
		out = append(out, c.Name)
	}
	return out, nil
}

// ForgetRecords removes the records and environment files of every job
// but those kept: an agent that died between writing them and starting
// its unit leaves them, and no unit's ExecStopPost ever will. Environment
// files hold the jobs' secrets.
func (r *Runtime) ForgetRecords(keep []*Job) {
	kept := map[string]bool{}
	for _, j := range keep {
		kept[r.recordPath(j.paths)] = true
		kept[j.paths.Env] = true
	}
	for _, dir := range []string{r.Dir, r.System.Host().EnvDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if !kept[path] && strings.HasPrefix(e.Name(), UnitPrefix) {
				os.Remove(path)
			}
		}
	}
}
