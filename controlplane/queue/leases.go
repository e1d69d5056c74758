package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Leases is the queue as runners use it: asking for work (a long poll,
// woken when the runner's pool may have some), giving back what never
// reached them, appending an attempt's output and reporting how attempts
// ended. Every report is fenced by the attempt it names. A refusal is a
// *runnerapi.ErrorBody with the code the runner reads.
type Leases struct {
	st       *store.Store
	listener *store.Listener
	bucket   *objects.Bucket
	log      *slog.Logger
	finisher *Finisher
	names    *names
	// defaultLeaseSeconds is the lease of pools without their own.
	defaultLeaseSeconds int

	mu      sync.Mutex        // guards waiting
	waiting map[uuid.UUID]int // lease requests in flight, by runner
}

// LeasesOptions are what Leases works with.
type LeasesOptions struct {
	// Bucket presigns the URLs of jobs' object keys (nil: none).
	Bucket *objects.Bucket
	// DefaultLeaseSeconds is the lease of pools without their own.
	DefaultLeaseSeconds int
	// QuarantineAfter host faults in a row quarantine a runner (zero:
	// DefaultQuarantineAfter).
	QuarantineAfter int
	Log             *slog.Logger
}

// Leases is the queue's runner side; its long polls are woken through
// the service's listener.
func (s *Service) Leases(o LeasesOptions) *Leases {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Leases{
		st: s.st, listener: s.listener, bucket: o.Bucket, log: o.Log.With("component", "leases"),
		finisher: s.Finisher(o.QuarantineAfter), names: newNames(s.st), defaultLeaseSeconds: o.DefaultLeaseSeconds,
		waiting: map[uuid.UUID]int{},
	}
}

// MaxLeaseRequestsPerRunner bounds the lease requests one runner may have
// in flight on one replica. An agent asks once at a time; a second may
// overlap the first while a dropped connection is noticed. More only hold
// the server's memory, connections and waits.
const MaxLeaseRequestsPerRunner = 4

// ErrStopping is the cause with which the server ends the requests in
// flight when it stops.
var ErrStopping = errors.New("the server is stopping")

// claimTimeout bounds a claim, or a give-back, that no longer follows its
// request.
const claimTimeout = 30 * time.Second

// AskForWork leases to runner the work that fits its request, claiming
// jobs one statement at a time until the answer is full or nothing else
// fits. With nothing to give it waits, woken when the runner's pool gets
// work, up to wait_seconds; the answer is then empty. Work goes only to
// the agent instance whose survivor check the server holds. A request
// that ends before its answer gets nothing, and what was claimed for it
// goes back to the queue; the caller gives back (GiveBack) what it could
// not hand over.
func (l *Leases) AskForWork(ctx context.Context, runner record.Runner, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error) {
	req, err := checkLeaseRequest(req)
	if err != nil {
		return nil, err
	}
	if !l.startAsking(runner.ID) {
		return nil, runnerapi.Refuse(runnerapi.CodeTooMany,
			"this runner has %d lease requests in flight already: ask again when one is answered", MaxLeaseRequestsPerRunner)
	}
	defer l.stopAsking(runner.ID)
	sub := l.listener.Subscribe(store.ChannelJobs)
	defer sub.Close()
	proof, err := l.st.TouchWorkRequest(ctx, runner.ID, req.Kinds)
	if err != nil {
		return nil, err
	}
	// Work only after this agent instance proved, in a heartbeat, that no
	// job from before its start runs unknown to the server. (The proof as
	// read now, not as the caller's runner row had it.)
	if proof == nil || !proof.Proves(req.AgentInstance) {
		return nil, runnerapi.Refuse(runnerapi.CodeRecoveryRequired,
			"no work before this agent's survivor check: send its recovery proof (survivors checked, runner isolated) in a heartbeat first")
	}
	wait := time.Duration(min(max(req.WaitSeconds, 0), runnerapi.MaxWaitSeconds)) * time.Second
	deadline, until := time.NewTimer(wait), time.Now().Add(wait)
	defer deadline.Stop()
	for ctx.Err() == nil { // no claim for a request already gone
		jobs, err := l.claim(ctx, runner, req, int(math.Ceil(time.Until(until).Seconds())))
		if err != nil {
			return nil, err
		}
		if len(jobs) > 0 {
			return l.grant(ctx, runner, jobs)
		}
		if waitForWork(ctx, sub.C, deadline.C, runner.PoolID.String()) == waitTimedOut {
			return []runnerapi.Lease{}, nil
		}
	}
	l.stopWaiting(ctx, runner.ID)
	return nil, context.Cause(ctx)
}

// checkLeaseRequest refuses a request no agent sends, and fills in the
// default of one lease.
func checkLeaseRequest(req runnerapi.LeaseRequest) (runnerapi.LeaseRequest, error) {
	bad := func(format string, args ...any) (runnerapi.LeaseRequest, error) {
		return req, runnerapi.Refuse(runnerapi.CodeBadRequest, format, args...)
	}
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 0 || req.Max > runnerapi.MaxLeasesPerRequest || len(req.Kinds) == 0 || len(req.Kinds) > runnerapi.MaxKinds {
		return bad("max: 1 to %d; kinds: 1 to %d names", runnerapi.MaxLeasesPerRequest, runnerapi.MaxKinds)
	}
	for _, k := range req.Kinds {
		if !runnerapi.ValidKind(k) {
			return bad("kinds: lower-case names")
		}
	}
	if len(req.UnavailableImages) > 2*runnerapi.MaxPoolImages {
		return bad("unavailable_images: at most %d", 2*runnerapi.MaxPoolImages)
	}
	if len(req.Stdio) > runnerapi.MaxStdioModes {
		return bad("stdio: at most %d modes", runnerapi.MaxStdioModes)
	}
	for _, m := range req.Stdio {
		if !m.Interactive() {
			return bad("stdio: the interactive modes the agent runs, TTY or PIPE (LOGS is every agent's)")
		}
	}
	for _, res := range []runnerapi.Resources{req.Free, req.Largest} {
		if res.Cores < 0 || res.MemoryMiB < 0 || res.GPUs < 0 || math.IsNaN(res.Cores) {
			return bad("free and largest: no negative amounts")
		}
	}
	return req, nil
}

// startAsking counts a lease request of the runner in, unless it has
// MaxLeaseRequestsPerRunner in flight already.
func (l *Leases) startAsking(runnerID uuid.UUID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting[runnerID] >= MaxLeaseRequestsPerRunner {
		return false
	}
	l.waiting[runnerID]++
	return true
}

func (l *Leases) stopAsking(runnerID uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting[runnerID]--; l.waiting[runnerID] <= 0 {
		delete(l.waiting, runnerID)
	}
}

// stopWaiting: a runner gone while it waited waits no longer, and runners
// that left jobs to it may take them. (A wait that timed out ended when
// its claim said it would; the runner, asking again at once, rewrites
// it.) Not when this replica stops: its runners ask another at once,
// which records them again, and a delete landing after that would undo
// it.
func (l *Leases) stopWaiting(ctx context.Context, runnerID uuid.UUID) {
	if errors.Is(context.Cause(ctx), ErrStopping) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	if err := l.st.StopWaiting(ctx, runnerID); err != nil {
		l.log.Warn("a runner that stopped asking is taken as waiting until its wait ends", "runner", runnerID, "err", err)
	}
}

// What a long-poll's wait ended with.
const (
	waitWork     = iota // the pool may have work: claim again
	waitTimedOut        // wait_seconds passed
	waitGone            // the request ended
)

// waitForWork waits until the runner's pool may have work (a notification
// naming it, or an empty one: a listener that reconnected may have missed
// some), the deadline passes or ctx ends. Notifications about other pools
// are not a reason to claim: with many idle runners each would cost a claim
// per runner.
func waitForWork(ctx context.Context, notes <-chan string, deadline <-chan time.Time, pool string) int {
	for {
		select {
		case <-ctx.Done():
			return waitGone
		case <-deadline:
			return waitTimedOut
		case p := <-notes:
			if p == "" || p == pool {
				return waitWork
			}
		}
	}
}

// claim leases what fits the request; waitSeconds is how long the request
// will wait for work if it finds none. It runs to its end even when the
// request ends meanwhile: a claim cancelled while it commits could lease
// jobs that nobody hears of. grant gives back what cannot be handed over.
func (l *Leases) claim(ctx context.Context, runner record.Runner, req runnerapi.LeaseRequest, waitSeconds int) ([]record.Job, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	return l.st.ClaimJobs(ctx, record.ClaimRequest{
		RunnerID: runner.ID, Kinds: req.Kinds, DefaultLeaseSeconds: l.defaultLeaseSeconds, SpecBytes: runnerapi.MaxAnswerSpecBytes,
		MaxHeld: runnerapi.MaxHeldLeases, UnavailableImages: req.UnavailableImages, Stdio: req.Stdio, WaitSeconds: max(waitSeconds, 0),
		Free:    record.Claim{Cores: req.Free.Cores, MemoryMiB: req.Free.MemoryMiB, GPUs: req.Free.GPUs},
		Largest: record.Claim{Cores: req.Largest.Cores, MemoryMiB: req.Largest.MemoryMiB, GPUs: req.Largest.GPUs},
	}, req.Max)
}

// grant turns the jobs leased to runner into the leases it is sent. When
// the request has already ended (the agent drained and stopped asking, or
// the connection dropped) the runner never sees them: they go back to
// the queue at once instead of waiting out their lease and costing each
// job a try.
func (l *Leases) grant(ctx context.Context, runner record.Runner, jobs []record.Job) ([]runnerapi.Lease, error) {
	if ctx.Err() != nil {
		l.giveBack(ctx, runner.ID, jobs)
		return nil, context.Cause(ctx)
	}
	leaseSeconds := fleet.LeaseSeconds(runner, l.defaultLeaseSeconds)
	named := l.leaseNames(ctx, runner, jobs)
	out := make([]runnerapi.Lease, 0, len(jobs))
	for _, j := range jobs {
		// A job's organisation: its pool's, or the one that submitted it
		// to a platform pool.
		org := runner.OrganisationID
		if j.SubmittedFor != nil {
			org = j.SubmittedFor
		}
		lease := runnerapi.Lease{
			LeaseID: j.ID.String(), Attempt: j.Attempt, Image: j.Image, Command: j.Command, Env: j.Env,
			Claim:            runnerapi.Resources{Cores: j.Claim.Cores, MemoryMiB: j.Claim.MemoryMiB, GPUs: j.Claim.GPUs},
			WallClockSeconds: j.Claim.WallClockSeconds, Kind: j.Kind, LeaseSeconds: leaseSeconds,
			Pool: named[j.PoolID], Network: j.Options.Network, WorkingDir: j.Options.WorkingDir, ScratchMiB: j.Options.ScratchMiB,
			DataMiB: j.Options.DataMiB, Stdio: j.Options.Stdio, IdleTimeoutSeconds: j.Options.IdleTimeoutSeconds,
		}
		if org != nil {
			lease.Organisation = named[*org]
		}
		lease.Inputs, lease.Outputs = l.presign(ctx, j, leaseSeconds)
		out = append(out, lease)
	}
	return out, nil
}

// GiveBack returns to the queue leases granted to runner that never
// reached it (its answer could not be written). (An answer lost after it
// was written is beyond the server's sight; the lease expires as before.)
func (l *Leases) GiveBack(ctx context.Context, runner record.Runner, leases []runnerapi.Lease) {
	jobs := make([]record.Job, 0, len(leases))
	for _, lease := range leases {
		if id, err := uuid.Parse(lease.LeaseID); err == nil {
			jobs = append(jobs, record.Job{ID: id, Attempt: lease.Attempt})
		}
	}
	l.giveBack(ctx, runner.ID, jobs)
}

func (l *Leases) giveBack(ctx context.Context, runnerID uuid.UUID, jobs []record.Job) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	n, err := l.st.ReturnUndelivered(ctx, runnerID, jobs, "the runner's request ended before the answer")
	if err != nil {
		l.log.Error("leases not delivered, and not given back: they expire", "runner", runnerID, "leases", len(jobs), "err", err)
		return
	}
	l.log.Info("leases not delivered: given back", "runner", runnerID, "leases", n)
}

// leaseNames are the names of the jobs' pool and organisations.
func (l *Leases) leaseNames(ctx context.Context, runner record.Runner, jobs []record.Job) map[uuid.UUID]string {
	orgs := []uuid.UUID{}
	if runner.OrganisationID != nil {
		orgs = append(orgs, *runner.OrganisationID)
	}
	for _, j := range jobs {
		if j.SubmittedFor != nil {
			orgs = append(orgs, *j.SubmittedFor)
		}
	}
	return l.names.of(ctx, []uuid.UUID{runner.PoolID}, orgs)
}

// LogLimitNote is what the stored output of an attempt cut at the bound
// ends with.
var LogLimitNote = fmt.Sprintf("[runmesh: output beyond this point was not kept (%d MiB per attempt)]\n",
	runnerapi.MaxLogChunksPerAttempt*runnerapi.MaxLogChunk>>20)

// errStale is the answer to a report for an attempt the runner does not
// hold.
var errStale = runnerapi.Refuse(runnerapi.CodeStaleAttempt, "this attempt is no longer the runner's: nothing was recorded")

// AppendOutput stores a chunk of a lease's output, fenced by the attempt.
// Past the bound of chunks an attempt may store, the note that says so
// takes the first place past it (once: a chunk stored before under a
// sequence number is kept) and the chunk itself is dropped; the runner is
// told with log_limit.
func (l *Leases) AppendOutput(ctx context.Context, runner record.Runner, id uuid.UUID, req runnerapi.LogUpload) error {
	if runnerapi.CheckAttempt(req.Attempt) != nil || req.Seq < 0 || req.Seq > math.MaxInt32 || len(req.Data) > runnerapi.MaxLogChunk {
		return runnerapi.Refuse(runnerapi.CodeBadRequest, "attempt 1 to %d, seq ≥ 0, data at most 32 KiB", runnerapi.MaxAttempt)
	}
	seq, data, full := req.Seq, req.Data, req.Seq >= runnerapi.MaxLogChunksPerAttempt
	if full {
		seq, data = runnerapi.MaxLogChunksPerAttempt, []byte(LogLimitNote)
	}
	err := l.st.AppendLog(ctx, id, req.Attempt, runner.ID, seq, data)
	switch {
	case errors.Is(err, store.ErrStaleAttempt):
		return errStale
	case errors.Is(err, store.ErrInteractive):
		// Whatever a runner sends: the bytes of a TTY or PIPE job are
		// never stored on the server.
		return runnerapi.Refuse(runnerapi.CodeBadRequest, "this job is interactive (stdio TTY or PIPE): the server stores none of its output")
	case err != nil:
		return err
	case full:
		return runnerapi.Refuse(runnerapi.CodeLogLimit,
			"this attempt's output is over the bound of %d chunks: nothing more of it is kept", runnerapi.MaxLogChunksPerAttempt)
	}
	return nil
}

// SessionStream fences a stream an agent holds for a lease's sessions:
// the runner must hold the job at this attempt, and the attempt must not
// have ended. A stale attempt's stream is refused and changes nothing.
func (l *Leases) SessionStream(ctx context.Context, runner record.Runner, id uuid.UUID, attempt int) error {
	if runnerapi.CheckAttempt(attempt) != nil {
		return runnerapi.Refuse(runnerapi.CodeBadRequest, "attempt 1 to %d", runnerapi.MaxAttempt)
	}
	if err := l.st.HoldsAttempt(ctx, id, attempt, runner.ID); errors.Is(err, store.ErrStaleAttempt) {
		return errStale
	} else if err != nil {
		return err
	}
	return nil
}

// Result ends one attempt, fenced: a stale attempt changes nothing.
func (l *Leases) Result(ctx context.Context, runner record.Runner, id uuid.UUID, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error) {
	if err := CheckResult(req); err != nil {
		return runnerapi.ResultResponse{}, runnerapi.Refuse(runnerapi.CodeBadRequest, "%v", err)
	}
	o := outcome(runner, id, req)
	if err := l.checkOutputs(ctx, &o); err != nil {
		return runnerapi.ResultResponse{}, err
	}
	done, err := l.finisher.Finish(ctx, o)
	switch {
	case errors.Is(err, store.ErrStaleAttempt), errors.Is(err, record.ErrNotFound):
		return runnerapi.ResultResponse{}, errStale
	case err != nil:
		return runnerapi.ResultResponse{}, err
	}
	return runnerapi.ResultResponse{State: string(done.State), AlreadyRecorded: done.AlreadyRecorded}, nil
}

// Results ends several attempts in one transaction. A malformed result
// refuses the whole request (nothing is recorded); a stale one is answered
// stale_attempt on its own, and the others count.
func (l *Leases) Results(ctx context.Context, runner record.Runner, req runnerapi.ResultsRequest) (runnerapi.ResultsResponse, error) {
	if len(req.Results) == 0 || len(req.Results) > runnerapi.MaxResultsPerRequest {
		return runnerapi.ResultsResponse{}, runnerapi.Refuse(runnerapi.CodeBadRequest, "results: 1 to %d", runnerapi.MaxResultsPerRequest)
	}
	outcomes := make([]record.Outcome, len(req.Results))
	for i, res := range req.Results {
		id, err := uuid.Parse(res.LeaseID)
		if err != nil {
			return runnerapi.ResultsResponse{}, runnerapi.Refuse(runnerapi.CodeBadRequest, "results[%d]: lease_id is not a lease", i)
		}
		if err := CheckResult(res.ResultRequest); err != nil {
			return runnerapi.ResultsResponse{}, runnerapi.Refuse(runnerapi.CodeBadRequest, "results[%d]: %s", i, err)
		}
		outcomes[i] = outcome(runner, id, res.ResultRequest)
		if err := l.checkOutputs(ctx, &outcomes[i]); err != nil {
			return runnerapi.ResultsResponse{}, err
		}
	}
	done, err := l.finisher.FinishAll(ctx, runner.ID, outcomes)
	if err != nil {
		return runnerapi.ResultsResponse{}, err
	}
	out := runnerapi.ResultsResponse{Results: make([]runnerapi.ResultAnswer, len(done))}
	stale := errStale.(*runnerapi.ErrorBody)
	for i, d := range done {
		out.Results[i].LeaseID = req.Results[i].LeaseID
		if d.Err != nil {
			out.Results[i].Error = &runnerapi.ErrorBody{Code: stale.Code, Message: stale.Message}
			continue
		}
		out.Results[i].State, out.Results[i].AlreadyRecorded = string(d.State), d.AlreadyRecorded
	}
	return out, nil
}

// CheckResult refuses a result that could not be true.
func CheckResult(req runnerapi.ResultRequest) error {
	if err := runnerapi.CheckAttempt(req.Attempt); err != nil {
		return err
	}
	if (req.ExitCode == nil) == (req.ReturnReason == nil) {
		return errors.New("exactly one of exit_code and return_reason")
	}
	if req.ExitCode != nil && (*req.ExitCode < math.MinInt32 || *req.ExitCode > math.MaxInt32) {
		return errors.New("exit_code: a 32-bit integer")
	}
	if req.PeakMemoryMiB != nil && *req.PeakMemoryMiB < 0 {
		return errors.New("peak_memory_mib: not negative")
	}
	if req.ReturnReason != nil {
		if err := runnerapi.CheckText("return_reason", *req.ReturnReason, 512); err != nil || *req.ReturnReason == "" {
			return errors.New("return_reason: 1 to 512 characters, no control characters")
		}
	}
	for name, v := range map[string]*string{"image_digest": req.ImageDigest, "runner_version": req.RunnerVersion} {
		if v != nil {
			if err := runnerapi.CheckText(name, *v, 256); err != nil || *v == "" {
				return fmt.Errorf("%s: 1 to 256 bytes when given, no control characters", name)
			}
		}
	}
	return runnerapi.CheckRecords(req.Inputs, req.Outputs)
}

// outcome is what runner reported of the attempt of job id.
func outcome(runner record.Runner, id uuid.UUID, req runnerapi.ResultRequest) record.Outcome {
	o := record.Outcome{
		JobID: id, Attempt: req.Attempt, RunnerID: runner.ID, ExitCode: req.ExitCode, ReturnReason: req.ReturnReason,
		HostFault: req.HostFault, OOM: req.OOM, PeakMemoryMiB: req.PeakMemoryMiB, ImageDigest: req.ImageDigest, RunnerVersion: req.RunnerVersion,
	}
	if len(req.Inputs) > 0 || len(req.Outputs) > 0 {
		o.Data = &record.RunData{Inputs: req.Inputs, Outputs: req.Outputs}
	}
	if o.RunnerVersion == nil {
		o.RunnerVersion = &runner.AgentVersion
	}
	return o
}
