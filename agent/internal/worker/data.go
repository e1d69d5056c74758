package worker

import (
	"context"
	"errors"
	"os"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// A job's data: its inputs are fetched before its unit starts, into a
// directory mounted read-only at /inputs; its outputs are uploaded from
// the directory mounted at /outputs once it exited 0. Both directories go
// with the attempt (forget).

func hasData(l runnerapi.Lease) bool { return len(l.Inputs) > 0 || len(l.Outputs) > 0 }

// fetchData makes the attempt's data directories and fetches its inputs.
// When it cannot, the result says whose fault that was.
func (w *Worker) fetchData(ctx context.Context, j *job) (runnerapi.ResultRequest, bool) {
	l, p := j.lease, j.paths
	if p.Data == "" {
		return giveBack("unrunnable here: this agent has no data directory for inputs and outputs", false), false
	}
	// What an earlier try of this attempt left (a restart mid-fetch).
	if err := os.RemoveAll(p.Data); err != nil {
		return giveBack("the job's data directory: "+err.Error(), true), false
	}
	if err := os.MkdirAll(p.Outputs, 0o700); err != nil {
		return giveBack("the job's data directory: "+err.Error(), true), false
	}
	// The container's user may be any user of its image, mapped to a
	// subordinate id: it must be able to write its outputs (the parent
	// directories stay the runmesh user's own).
	if err := os.Chmod(p.Outputs, 0o777); err != nil {
		return giveBack("the job's data directory: "+err.Error(), true), false
	}
	recs, err := w.Data.Fetch(ctx, l.Inputs, p.Inputs, &runtime.Budget{Left: l.DataMiB << 20})
	if err != nil {
		return dataFailure(err), false
	}
	for _, r := range recs {
		w.Log.Info("input fetched", "lease_id", l.LeaseID, "attempt", l.Attempt, "name", r.Name, "key", r.Key,
			"sha256", r.SHA256, "size", r.Size, "etag", r.ETag)
	}
	// Written down with the lease: a restarted agent's result attests
	// them too.
	j.inputs = recs
	if err := w.save(j); err != nil {
		return giveBack("the agent could not write its lease record: "+err.Error(), true), false
	}
	return runnerapi.ResultRequest{}, true
}

// uploadData uploads the outputs of an attempt that exited 0, and puts
// what was fetched and uploaded in its result. An output that cannot be
// uploaded makes the attempt a given-back one, saying why.
func (w *Worker) uploadData(ctx context.Context, j *job, res runnerapi.ResultRequest) runnerapi.ResultRequest {
	l := j.lease
	res.Inputs = j.inputs
	if len(l.Outputs) == 0 || res.ExitCode == nil || *res.ExitCode != 0 {
		return res
	}
	// The claim bounds inputs and outputs together.
	left := l.DataMiB << 20
	for _, in := range j.inputs {
		left -= in.Size
	}
	recs, err := w.Data.Upload(ctx, l.Outputs, j.paths.Outputs, &runtime.Budget{Left: max(left, 0)})
	if err != nil {
		failed := dataFailure(err)
		failed.Attempt, failed.ImageDigest, failed.RunnerVersion, failed.PeakMemoryMiB = res.Attempt, res.ImageDigest, res.RunnerVersion, res.PeakMemoryMiB
		failed.Inputs = res.Inputs
		return failed
	}
	res.Outputs = recs
	for _, r := range recs {
		w.Log.Info("output uploaded", "lease_id", l.LeaseID, "attempt", l.Attempt, "key", r.Key, "sha256", r.SHA256, "size", r.Size, "md5", r.MD5)
	}
	return res
}

// dataFailure is a failed transfer as a result.
func dataFailure(err error) runnerapi.ResultRequest {
	var e *runtime.DataError
	if errors.As(err, &e) {
		return giveBack(e.Error(), !e.JobFault)
	}
	return giveBack(err.Error(), true)
}

// dropData removes the attempt's inputs and outputs.
func (w *Worker) dropData(j *job) {
	if j.paths.Data != "" {
		if err := os.RemoveAll(j.paths.Data); err != nil {
			w.Log.Warn("removing a job's data", "lease_id", j.lease.LeaseID, "err", err)
		}
	}
}
