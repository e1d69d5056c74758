package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// job is one held lease at one attempt.
type job struct {
	lease runnerapi.Lease // without Env once started
	gpus  []string
	paths runtime.Paths
	// Set under Worker.mu.
	phase    string
	answered bool // the server answered for it since the agent started
	cancel   bool
	gone     bool

	digest   string
	inputs   []runnerapi.InputRecord // fetched, for the result
	peak     uint64
	log      chunk  // the last chunk sent, or being sent
	pending  bool   // log was written down but not yet accepted
	logFull  bool   // the server keeps no more of this attempt's output
	followed bool   // a follow goroutine owns it (under Worker.mu)
	unit     string // set once started
	// wake asks for a read of the unit: true when podman said its
	// container died or ran out of memory.
	wake chan bool
}

func newJob(l runnerapi.Lease, p runtime.Paths, phase string) *job {
	return &job{lease: l, paths: p, phase: phase, log: chunk{Seq: -1}, wake: make(chan bool, 1)}
}

// record is what survives the agent for a held lease.
type record struct {
	Lease  runnerapi.Lease `json:"lease"`
	GPUs   []string        `json:"gpus,omitempty"`
	Digest string          `json:"digest,omitempty"`
	Log    chunk           `json:"log"`
	// Inputs is what was fetched, which the result attests.
	Inputs []runnerapi.InputRecord `json:"inputs,omitempty"`
}

func (w *Worker) save(j *job) error {
	w.mu.Lock()
	digest := j.digest
	w.mu.Unlock()
	b, err := json.Marshal(record{Lease: j.lease, GPUs: j.gpus, Digest: digest, Log: j.log, Inputs: j.inputs})
	if err != nil {
		return err
	}
	tmp := w.recordPath(j.paths) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, w.recordPath(j.paths))
}

// unknownClaim: adopted without a readable record, so what it books (its
// claim, its GPUs) is not known here, and the whole host is taken to be
// booked while it runs: a GPU it uses is never handed to another job.
// Derived from the lease, which names an image for every job the server
// leases, so a record saved for it later (its output's progress) does not
// make it known.
func (j *job) unknownClaim() bool { return j.lease.Image == "" }

// load fills in an adopted job from its record; without a readable record
// it stays as the unit names it (unknownClaim).
func (w *Worker) load(j *job) {
	b, err := os.ReadFile(w.recordPath(j.paths))
	if err != nil {
		w.Log.Warn("an adopted job has no lease record: no new work until it ends", "lease_id", j.lease.LeaseID, "err", err)
		return
	}
	var r record
	if json.Unmarshal(b, &r) != nil || r.Lease.LeaseID != j.lease.LeaseID || r.Lease.Attempt != j.lease.Attempt {
		w.Log.Warn("an adopted job's lease record is unreadable: no new work until it ends", "lease_id", j.lease.LeaseID)
		return
	}
	j.lease, j.gpus, j.digest, j.log, j.inputs = r.Lease, r.GPUs, r.Digest, r.Log, r.Inputs
	j.pending = r.Log.Seq >= 0 && r.Log.To > r.Log.From
}

// start takes a new lease: it is held (and heartbeated) from here on.
func (w *Worker) start(ctx context.Context, l runnerapi.Lease) {
	host := w.Runtime.Host()
	j := newJob(l, host.Paths(l.LeaseID, l.Attempt), runnerapi.PhaseStarting)
	j.gpus = w.freeGPUs(l.Claim.GPUs)
	w.mu.Lock()
	if old := w.held[l.LeaseID]; old != nil {
		// The server took the lease back (we missed the GONE) and gave a
		// later attempt to us again: the older one must stop.
		old.gone = true
	}
	w.held[l.LeaseID] = j
	w.mu.Unlock()
	log := w.Log.With("lease_id", l.LeaseID, "attempt", l.Attempt)
	if l.Claim.GPUs > 0 && j.gpus == nil {
		go w.finish(ctx, j, giveBack("the GPUs the lease needs are no longer free", true))
		return
	}
	env := l.Env
	j.lease.Env = nil
	if err := w.save(j); err != nil {
		go w.finish(ctx, j, giveBack("the agent could not write its lease record: "+err.Error(), true))
		return
	}
	log.Info("lease taken", "image", l.Image, "cores", l.Claim.Cores, "memory_mib", l.Claim.MemoryMiB, "gpus", j.gpus)
	go func() {
		res, ok := w.launch(ctx, j, env)
		if !ok {
			w.finish(ctx, j, res)
			return
		}
		w.follow(ctx, j)
	}()
}

// localFor is how long an image seen on this host is taken to be there
// without asking podman again (a call to its service per job).
const localFor = 10 * time.Minute

// launch makes the image local and starts the unit. When it cannot, the
// result says whose fault that was.
func (w *Worker) launch(ctx context.Context, j *job, env map[string]string) (runnerapi.ResultRequest, bool) {
	l := j.lease
	w.mu.Lock()
	seen, known := w.local[l.Image]
	w.mu.Unlock()
	if !known || time.Since(seen) > localFor {
		log := w.Log.With("lease_id", l.LeaseID, "attempt", l.Attempt, "image", l.Image)
		digest, err := w.Runtime.EnsureImage(ctx, l.Image, &pullProgress{line: func(line string) {
			log.Info("pulling the job's image", "progress", line)
		}})
		if err != nil {
			var ie *runtime.ImageError
			if errors.As(err, &ie) {
				return giveBack(ie.Error(), !ie.JobFault), false
			}
			return giveBack(err.Error(), true), false
		}
		j.digest = digest
		w.mu.Lock()
		w.local[l.Image] = time.Now()
		w.mu.Unlock()
	}
	if hasData(l) {
		if res, ok := w.fetchData(ctx, j); !ok {
			return res, false
		}
	}
	u, err := w.Runtime.Start(ctx, runtime.Spec{
		JobID: l.LeaseID, LeaseID: l.LeaseID, Attempt: l.Attempt, Image: l.Image, Command: l.Command, Env: env,
		Cores: l.Claim.Cores, MemoryMiB: l.Claim.MemoryMiB, GPUs: j.gpus, WallClockSeconds: l.WallClockSeconds,
		Network: l.Network, WorkingDir: l.WorkingDir, ScratchMiB: l.ScratchMiB,
		Inputs: len(l.Inputs) > 0, Outputs: len(l.Outputs) > 0,
	})
	j.unit = u.Name
	switch {
	case errors.Is(err, runtime.ErrUnrunnable):
		return giveBack(err.Error(), false), false
	case err != nil && u.Name == "":
		return giveBack("the job unit could not be made: "+err.Error(), true), false
	case err != nil:
		// The unit exists and failed to start, or the start was not
		// confirmed: its status tells which, below.
		w.Log.Warn("job unit start", "unit", u.Name, "err", err)
	}
	w.mu.Lock()
	j.phase = runnerapi.PhaseRunning
	w.mu.Unlock()
	w.Kick()
	if j.digest == "" {
		// A known image: its digest is read while the job runs.
		go func() {
			if d, err := w.Runtime.EnsureImage(ctx, l.Image, nil); err == nil {
				w.mu.Lock()
				j.digest = d
				w.mu.Unlock()
			}
		}()
	}
	return runnerapi.ResultRequest{}, true
}

func giveBack(reason string, hostFault bool) runnerapi.ResultRequest {
	return runnerapi.ResultRequest{ReturnReason: &reason, HostFault: hostFault}
}

// follow watches a started (or adopted) unit until it ends, sending its
// output as it grows and obeying the server's answers. The unit is read
// when podman says its container died (then often, until systemd has
// ended the unit: podman's cleanup comes first), and every Recheck.
func (w *Worker) follow(ctx context.Context, j *job) {
	f := &follower{w: w, j: j, log: w.Log.With("lease_id", j.lease.LeaseID, "attempt", j.lease.Attempt, "unit", j.unit)}
	out := time.NewTicker(w.Poll)
	defer out.Stop()
	check := time.NewTimer(0)
	defer check.Stop()
	burst := 0
	for {
		var st *runtime.Status
		select {
		case <-ctx.Done():
			return
		case <-out.C:
		case death := <-j.wake:
			if death {
				burst = afterEventReads
			}
			check.Reset(0)
			continue
		case <-check.C:
			s, err := w.Runtime.Status(ctx, j.unit)
			switch {
			case errors.Is(err, runtime.ErrNoUnit):
				w.finish(ctx, j, giveBack("the job's unit disappeared from the user's systemd manager", true))
				return
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				f.log.Warn("job unit status", "err", err)
			default:
				st = &s
			}
			next := w.Recheck
			if burst > 0 {
				burst, next = burst-1, afterEventEvery
			}
			check.Reset(next)
		}
		if f.step(ctx, st) {
			return
		}
	}
}

// After a container's death its unit is read this often, this many times,
// then every Recheck again.
const (
	afterEventEvery = 100 * time.Millisecond
	afterEventReads = 50
)

// follower is one follow's state.
type follower struct {
	w        *Worker
	j        *job
	log      *slog.Logger
	stopping bool
}

// step acts on what is known of the job: st is the unit's state when it
// was just read, nil otherwise. It reports whether the job is done with.
func (f *follower) step(ctx context.Context, st *runtime.Status) bool {
	w, j := f.w, f.j
	ended := st != nil && st.Ended
	if st != nil && st.MemoryBytes > j.peak {
		j.peak = st.MemoryBytes
	}
	if !ended { // an ended job's output is sent below, to its end
		w.sendOutput(ctx, j)
	}
	w.mu.Lock()
	cancel, gone := j.cancel, j.gone
	w.mu.Unlock()
	if gone {
		// The server gave the lease to no one or to someone else: stop
		// the job and report nothing.
		f.log.Warn("the server no longer holds this lease for us: stopping the job")
		w.forget(ctx, j)
		w.drop(j)
		return true
	}
	if ended {
		// All of the output before the result: once the attempt is
		// finished the server takes no more of it.
		for backoff := time.Second; !w.sendOutput(ctx, j); backoff = min(2*backoff, 30*time.Second) {
			if w.isGone(j) {
				break
			}
			select {
			case <-ctx.Done():
				return true // the unit stays, ended: the next agent sends it
			case <-time.After(backoff):
			}
		}
		if w.isGone(j) {
			w.forget(ctx, j)
			w.drop(j)
			return true
		}
		w.finish(ctx, j, w.uploadData(ctx, j, w.outcome(j, *st, cancel)))
		return true
	}
	if cancel && !f.stopping {
		f.stopping = true
		f.log.Info("cancelled: stopping the job")
		go func() {
			if err := w.Runtime.Stop(ctx, j.unit); err != nil {
				f.log.Warn("stop", "err", err)
			}
		}()
	}
	return false
}

// outcome turns how the unit ended into a result.
func (w *Worker) outcome(j *job, st runtime.Status, cancelled bool) runnerapi.ResultRequest {
	var r runnerapi.ResultRequest
	switch {
	case cancelled:
		r = giveBack("cancelled", false)
	case st.WallClock:
		r = giveBack(fmt.Sprintf("stopped at its wall clock of %d seconds", j.lease.WallClockSeconds), false)
	case st.StartFailed && (st.StartStatus == 126 || st.StartStatus == 127):
		why, _ := startError(j.paths.StartLog)
		r = giveBack(fmt.Sprintf("the job's command could not be run (podman exit status %d)%s", st.StartStatus, why), false)
	case st.StartFailed:
		why, jobFault := startError(j.paths.StartLog)
		r = giveBack(fmt.Sprintf("the container did not start (unit result %s, podman exit status %d)%s", st.Result, st.StartStatus, why), !jobFault)
	case st.ExitCode != nil:
		r.ExitCode = st.ExitCode
		r.OOM = st.OOM
	default:
		r = giveBack("the job's unit ended without an exit code (result "+st.Result+")", true)
	}
	if j.peak > 0 {
		mib := int64((j.peak + 1<<20 - 1) >> 20)
		r.PeakMemoryMiB = &mib
	}
	return r
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

func (w *Worker) isGone(j *job) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return j.gone
}

// finish reports the attempt's result until the server has it (or says
// the attempt is no longer ours), then lets the unit go.
func (w *Worker) finish(ctx context.Context, j *job, r runnerapi.ResultRequest) {
	r.Attempt = j.lease.Attempt
	w.mu.Lock()
	if j.digest != "" {
		d := j.digest
		r.ImageDigest = &d
	}
	w.mu.Unlock()
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
	w.forget(ctx, j)
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

// forget stops the unit (if it still runs) and lets systemd drop it.
func (w *Worker) forget(ctx context.Context, j *job) {
	if j.unit == "" {
		return
	}
	if err := w.Runtime.Forget(ctx, j.unit); err != nil {
		w.Log.Warn("letting the job unit go", "unit", j.unit, "err", err)
	}
	os.Remove(j.paths.StartLog)
}

// startJobFaults are what podman says when the job, not the host, is why
// its container did not start.
var startJobFaults = []*regexp.Regexp{
	regexp.MustCompile(`workdir "[^"]*" does not exist`),
}

// startError is podman's last complaint in a unit's start log, as ": …"
// for a reason, and whether it is the job's fault.
func startError(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "Error: ")
	if last == "" {
		return "", false
	}
	last = runnerapi.Clip(strings.ToValidUTF8(last, ""), 300)
	for _, re := range startJobFaults {
		if re.MatchString(last) {
			return ": " + last, true
		}
	}
	return ": " + last, false
}
