package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// Job is one attempt of a lease on this host, from Take (a new lease) or
// Survivors (one an earlier agent left) to End.
type Job struct {
	r     *Runtime
	lease runnerapi.Lease // without Env
	gpus  []string
	paths Paths
	// wake asks for a read of the unit: true when podman said its
	// container died or ran out of memory.
	wake chan bool

	// Set under Runtime.mu.
	cancel bool // the server cancelled it: stop it, and say so
	idle   bool // an interactive job idle past its bound: stop it, and say so
	gone   bool // the server no longer holds its lease for this runner
	digest string

	// Only the goroutine that runs the job (Launch, then Follow) touches
	// these.
	inputs  []runnerapi.InputRecord // fetched, for the result
	peak    uint64
	log     chunk  // the last chunk sent, or being sent
	pending bool   // log was written down but not yet accepted
	logFull bool   // the server keeps no more of this attempt's output
	unit    string // set once started
}

func (r *Runtime) newJob(l runnerapi.Lease) *Job {
	l.Env = nil
	return &Job{r: r, lease: l, paths: r.System.Host().Paths(l.LeaseID, l.Attempt), log: chunk{Seq: -1}, wake: make(chan bool, 1)}
}

// Take makes the job of a lease just granted, with the GPUs (by UUID) it
// is given. Its environment is not kept: Launch takes it.
func (r *Runtime) Take(l runnerapi.Lease, gpus []string) *Job {
	r.init()
	j := r.newJob(l)
	j.gpus = gpus
	r.register(j)
	return j
}

// Lease is the job's lease, without its environment.
func (j *Job) Lease() runnerapi.Lease { return j.lease }

// GPUs are the UUIDs of the GPUs the job was given.
func (j *Job) GPUs() []string { return j.gpus }

// Unit is the name of the job's unit, once it has one.
func (j *Job) Unit() string { return j.unit }

// Digest is the digest of the job's image, once known.
func (j *Job) Digest() string {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return j.digest
}

// Cancel tells the job that the server cancelled it: it is stopped, and
// its result says so.
func (j *Job) Cancel() {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.cancel = true
}

// StopIdle tells an interactive job that no byte went either way for its
// idle timeout: it is stopped, and its run ends IDLE.
func (j *Job) StopIdle() {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.idle = true
}

// StoppedIdle reports whether StopIdle was called.
func (j *Job) StoppedIdle() bool {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return j.idle
}

// LeaseLost tells the job that the server no longer holds its lease for
// this runner: it is stopped, and nothing is reported.
func (j *Job) LeaseLost() {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	j.gone = true
}

// Lost reports whether the job's lease is lost (LeaseLost, or a refusal
// of its output as a stale attempt).
func (j *Job) Lost() bool {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return j.gone
}

// record is what survives the agent for a job.
type record struct {
	Lease  runnerapi.Lease `json:"lease"`
	GPUs   []string        `json:"gpus,omitempty"`
	Digest string          `json:"digest,omitempty"`
	Log    chunk           `json:"log"`
	// Inputs is what was fetched, which the result attests.
	Inputs []runnerapi.InputRecord `json:"inputs,omitempty"`
}

// recordPath is where a job's record lives.
func (r *Runtime) recordPath(p Paths) string {
	return filepath.Join(r.Dir, p.Container+".json")
}

// Save writes the job's record down.
func (j *Job) Save() error {
	digest := j.Digest()
	b, err := json.Marshal(record{Lease: j.lease, GPUs: j.gpus, Digest: digest, Log: j.log, Inputs: j.inputs})
	if err != nil {
		return err
	}
	tmp := j.r.recordPath(j.paths) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, j.r.recordPath(j.paths))
}

// UnknownClaim reports whether the job was adopted without a readable
// record, so that what it books (its claim, its GPUs) is not known here.
// Derived from the lease, which names an image for every job the server
// leases, so a record saved for it later (its output's progress) does not
// make it known.
func (j *Job) UnknownClaim() bool { return j.lease.Image == "" }

// load fills in an adopted job from its record; without a readable record
// it stays as the unit names it (UnknownClaim).
func (j *Job) load() {
	b, err := os.ReadFile(j.r.recordPath(j.paths))
	if err != nil {
		j.r.Log.Warn("an adopted job has no lease record: no new work until it ends", "lease_id", j.lease.LeaseID, "err", err)
		return
	}
	var rec record
	if json.Unmarshal(b, &rec) != nil || rec.Lease.LeaseID != j.lease.LeaseID || rec.Lease.Attempt != j.lease.Attempt {
		j.r.Log.Warn("an adopted job's lease record is unreadable: no new work until it ends", "lease_id", j.lease.LeaseID)
		return
	}
	j.lease, j.gpus, j.digest, j.log, j.inputs = rec.Lease, rec.GPUs, rec.Digest, rec.Log, rec.Inputs
	j.pending = rec.Log.Seq >= 0 && rec.Log.To > rec.Log.From
}

// localFor is how long an image seen on this host is taken to be there
// without asking podman again (a call to its service per job).
const localFor = 10 * time.Minute

// Launch makes the image local, fetches the inputs and starts the unit,
// whose container gets env. When it cannot, the result says whose fault
// that was, and the job is to be reported and ended.
func (j *Job) Launch(ctx context.Context, env map[string]string) (runnerapi.ResultRequest, bool) {
	r, l := j.r, j.lease
	r.mu.Lock()
	seen, known := r.local[l.Image]
	r.mu.Unlock()
	if !known || time.Since(seen) > localFor {
		log := r.Log.With("lease_id", l.LeaseID, "attempt", l.Attempt, "image", l.Image)
		digest, err := r.System.EnsureImage(ctx, l.Image, &pullProgress{line: func(line string) {
			log.Info("pulling the job's image", "progress", line)
		}})
		if err != nil {
			var ie *ImageError
			if errors.As(err, &ie) {
				return GiveBack(ie.Error(), !ie.JobFault), false
			}
			return GiveBack(err.Error(), true), false
		}
		r.mu.Lock()
		j.digest = digest
		r.local[l.Image] = time.Now()
		r.mu.Unlock()
	}
	if hasData(l) {
		if res, ok := j.fetchData(ctx); !ok {
			return res, false
		}
	}
	u, err := r.System.Start(ctx, Spec{
		JobID: l.LeaseID, LeaseID: l.LeaseID, Attempt: l.Attempt, Image: l.Image, Command: l.Command, Env: env,
		Cores: l.Claim.Cores, MemoryMiB: l.Claim.MemoryMiB, GPUs: j.gpus, WallClockSeconds: l.WallClockSeconds,
		Network: l.Network, WorkingDir: l.WorkingDir, ScratchMiB: l.ScratchMiB,
		Inputs: len(l.Inputs) > 0, Outputs: len(l.Outputs) > 0, Stdio: l.Stdio,
	})
	j.unit = u.Name
	switch {
	case errors.Is(err, ErrUnrunnable):
		return GiveBack(err.Error(), false), false
	case err != nil && u.Name == "":
		return GiveBack("the job unit could not be made: "+err.Error(), true), false
	case err != nil:
		// The unit exists and failed to start, or the start was not
		// confirmed: its status tells which, as it is followed.
		r.Log.Warn("job unit start", "unit", u.Name, "err", err)
	}
	if j.Digest() == "" {
		// A known image: its digest is read while the job runs.
		go func() {
			if d, err := r.System.EnsureImage(ctx, l.Image, nil); err == nil {
				r.mu.Lock()
				j.digest = d
				r.mu.Unlock()
			}
		}()
	}
	return runnerapi.ResultRequest{}, true
}

// IdleReason begins the return reason of a run an idle timeout ended.
const IdleReason = "IDLE"

// GiveBack is the result of an attempt that did not run to its own end,
// with the reason, and whether the host (not the job) is at fault.
func GiveBack(reason string, hostFault bool) runnerapi.ResultRequest {
	return runnerapi.ResultRequest{ReturnReason: &reason, HostFault: hostFault}
}

// Outcome is how a Follow ended.
type Outcome int

const (
	// Interrupted: its context ended first. The job is left as it is, on
	// the host, for the next agent.
	Interrupted Outcome = iota
	// Finished: the job ended (or its unit is gone). Report the result,
	// then End it.
	Finished
	// Abandoned: the lease is lost; the job is stopped. End it, and report
	// nothing.
	Abandoned
)

// Follow watches a started (or adopted) unit until it ends, sending its
// output as it grows and obeying Cancel and LeaseLost. The unit is read
// when podman says its container died (then often, until systemd has
// ended the unit: podman's cleanup comes first), and every Recheck. When
// it is Finished, the result says how the job ended, and its outputs are
// uploaded.
func (j *Job) Follow(ctx context.Context) (runnerapi.ResultRequest, Outcome) {
	r := j.r
	r.init()
	r.register(j)
	f := &follower{j: j, log: r.Log.With("lease_id", j.lease.LeaseID, "attempt", j.lease.Attempt, "unit", j.unit)}
	out := time.NewTicker(r.Poll)
	defer out.Stop()
	check := time.NewTimer(0)
	defer check.Stop()
	burst := 0
	for {
		var st *Status
		select {
		case <-ctx.Done():
			return runnerapi.ResultRequest{}, Interrupted
		case <-out.C:
		case death := <-j.wake:
			if death {
				burst = afterEventReads
			}
			check.Reset(0)
			continue
		case <-check.C:
			s, err := r.System.Status(ctx, j.unit)
			switch {
			case errors.Is(err, ErrNoUnit):
				return GiveBack("the job's unit disappeared from the user's systemd manager", true), Finished
			case err != nil && ctx.Err() != nil:
				return runnerapi.ResultRequest{}, Interrupted
			case err != nil:
				f.log.Warn("job unit status", "err", err)
			default:
				st = &s
			}
			next := r.Recheck
			if burst > 0 {
				burst, next = burst-1, afterEventEvery
			}
			check.Reset(next)
		}
		if res, how, done := f.step(ctx, st); done {
			return res, how
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
	j        *Job
	log      *slog.Logger
	stopping bool
}

// step acts on what is known of the job: st is the unit's state when it
// was just read, nil otherwise. It reports whether the job is done with,
// and how.
func (f *follower) step(ctx context.Context, st *Status) (runnerapi.ResultRequest, Outcome, bool) {
	j, r := f.j, f.j.r
	ended := st != nil && st.Ended
	if st != nil && st.MemoryBytes > j.peak {
		j.peak = st.MemoryBytes
	}
	if !ended { // an ended job's output is sent below, to its end
		j.sendOutput(ctx)
	}
	r.mu.Lock()
	cancel, gone := j.cancel || j.idle, j.gone
	r.mu.Unlock()
	if gone {
		// The server gave the lease to no one or to someone else: stop
		// the job and report nothing.
		f.log.Warn("the server no longer holds this lease for us: stopping the job")
		return runnerapi.ResultRequest{}, Abandoned, true
	}
	if ended {
		// All of the output before the result: once the attempt is
		// finished the server takes no more of it.
		for backoff := time.Second; !j.sendOutput(ctx); backoff = min(2*backoff, 30*time.Second) {
			if j.Lost() {
				break
			}
			select {
			case <-ctx.Done():
				return runnerapi.ResultRequest{}, Interrupted, true // the unit stays, ended: the next agent sends it
			case <-time.After(backoff):
			}
		}
		if j.Lost() {
			return runnerapi.ResultRequest{}, Abandoned, true
		}
		return j.uploadData(ctx, j.outcome(*st, cancel)), Finished, true
	}
	if cancel && !f.stopping {
		f.stopping = true
		f.log.Info("stopping the job: cancelled, or idle past its bound")
		go func() {
			if err := r.System.Stop(ctx, j.unit); err != nil {
				f.log.Warn("stop", "err", err)
			}
		}()
	}
	return runnerapi.ResultRequest{}, Interrupted, false
}

// outcome turns how the unit ended into a result.
func (j *Job) outcome(st Status, cancelled bool) runnerapi.ResultRequest {
	j.r.mu.Lock()
	idle := j.idle
	j.r.mu.Unlock()
	var r runnerapi.ResultRequest
	switch {
	case idle:
		r = GiveBack(fmt.Sprintf("%s: no byte in either direction for %d seconds", IdleReason, j.lease.IdleTimeoutSeconds), false)
	case cancelled:
		r = GiveBack("cancelled", false)
	case st.WallClock:
		r = GiveBack(fmt.Sprintf("stopped at its wall clock of %d seconds", j.lease.WallClockSeconds), false)
	case st.StartFailed && (st.StartStatus == 126 || st.StartStatus == 127):
		why, _ := startError(j.paths.StartLog)
		r = GiveBack(fmt.Sprintf("the job's command could not be run (podman exit status %d)%s", st.StartStatus, why), false)
	case st.StartFailed:
		why, jobFault := startError(j.paths.StartLog)
		r = GiveBack(fmt.Sprintf("the container did not start (unit result %s, podman exit status %d)%s", st.Result, st.StartStatus, why), !jobFault)
	case st.ExitCode != nil:
		r.ExitCode = st.ExitCode
		r.OOM = st.OOM
	default:
		r = GiveBack("the job's unit ended without an exit code (result "+st.Result+")", true)
	}
	if j.peak > 0 {
		mib := int64((j.peak + 1<<20 - 1) >> 20)
		r.PeakMemoryMiB = &mib
	}
	return r
}

// End lets the job go once its result is reported (or none is to be): it
// stops the unit (if it still runs), lets systemd drop it, and removes
// what the job left on this host (its record, output and data).
func (j *Job) End(ctx context.Context) {
	r := j.r
	if j.unit != "" {
		if err := r.System.Forget(ctx, j.unit); err != nil {
			r.Log.Warn("letting the job unit go", "unit", j.unit, "err", err)
		}
		os.Remove(j.paths.StartLog)
	}
	r.unregister(j)
	os.Remove(r.recordPath(j.paths))
	os.Remove(j.paths.Log)
	j.dropData()
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
