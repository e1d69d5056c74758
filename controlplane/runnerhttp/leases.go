package runnerhttp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// leases grants the runner work that fits, claiming jobs one statement at
// a time until the answer is full or nothing else fits. With nothing to
// give it waits, woken by NOTIFY when its pool gets work, up to
// wait_seconds.
func (s *Server) leases(w http.ResponseWriter, r *http.Request) {
	c := callerFrom(r.Context())
	var req runnerapi.LeaseRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 0 || req.Max > runnerapi.MaxLeasesPerRequest || len(req.Kinds) == 0 || len(req.Kinds) > runnerapi.MaxKinds {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("max: 1 to %d; kinds: 1 to %d names", runnerapi.MaxLeasesPerRequest, runnerapi.MaxKinds))
		return
	}
	for _, k := range req.Kinds {
		if !runnerapi.ValidKind(k) {
			writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "kinds: lower-case names")
			return
		}
	}
	if len(req.UnavailableImages) > 2*runnerapi.MaxPoolImages {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("unavailable_images: at most %d", 2*runnerapi.MaxPoolImages))
		return
	}
	for _, res := range []runnerapi.Resources{req.Free, req.Largest} {
		if res.Cores < 0 || res.MemoryMiB < 0 || res.GPUs < 0 || res.Cores != res.Cores {
			writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "free and largest: no negative amounts")
			return
		}
	}
	ctx := r.Context()
	sub := s.o.Listener.Subscribe(store.ChannelJobs)
	defer sub.Close()
	proof, err := s.o.Store.TouchWorkRequest(ctx, c.runner.ID, req.Kinds)
	if err != nil {
		s.internal(w, r, "leases", err)
		return
	}
	// Work only after this agent instance proved, in a heartbeat, that no
	// job from before its start runs unknown to the server. (The proof as
	// read now, not as the caller's runner row had it.)
	if proof == nil || !proof.Proves(req.AgentInstance) {
		writeError(w, http.StatusConflict, runnerapi.CodeRecoveryRequired,
			"no work before this agent's survivor check: send its recovery proof (survivors checked, runner isolated) in a heartbeat first")
		return
	}
	leaseSeconds := fleet.LeaseSeconds(c.runner, s.o.DefaultLeaseSeconds)
	wait := time.Duration(min(max(req.WaitSeconds, 0), runnerapi.MaxWaitSeconds)) * time.Second
	deadline, until := time.NewTimer(wait), time.Now().Add(wait)
	defer deadline.Stop()
	for ctx.Err() == nil { // no claim for a request already gone
		jobs, err := s.claim(ctx, c, req, int(math.Ceil(time.Until(until).Seconds())))
		if err != nil {
			s.internal(w, r, "leases", err)
			return
		}
		if len(jobs) > 0 {
			s.deliver(w, r, c, jobs, leaseSeconds)
			return
		}
		// waitGone: the request ended, and so does the loop.
		if waitForWork(ctx, sub.C, deadline.C, c.runner.PoolID.String()) == waitTimedOut {
			writeJSON(w, http.StatusOK, runnerapi.LeaseResponse{Leases: []runnerapi.Lease{}})
			return
		}
	}
	// Gone while it waited: the runner waits no longer, and runners that
	// left jobs to it may take them. (A wait that timed out ended when its
	// claim said it would; the runner, asking again at once, rewrites it.)
	// Not when this replica stops: its runners ask another at once, which
	// records them again, and a delete landing after that would undo it.
	if errors.Is(context.Cause(ctx), ErrStopping) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	if err := s.o.Store.StopWaiting(ctx, c.runner.ID); err != nil {
		s.o.Log.Warn("a runner that stopped asking is taken as waiting until its wait ends", "runner", c.runner.ID, "err", err)
	}
}

// ErrStopping is the cause with which the server ends the requests in
// flight (their base context) when it stops.
var ErrStopping = errors.New("the server is stopping")

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

// claimTimeout bounds a claim that no longer follows its request.
const claimTimeout = 30 * time.Second

// claim leases what fits the request; waitSeconds is how long the request
// will wait for work if it finds none. It runs to its end even when the
// request ends meanwhile: a claim cancelled while it commits could lease
// jobs that nobody hears of. deliver gives back what cannot be handed over.
func (s *Server) claim(ctx context.Context, c caller, req runnerapi.LeaseRequest, waitSeconds int) ([]record.Job, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	return s.o.Queue.Claim(ctx, record.ClaimRequest{
		RunnerID: c.runner.ID, Kinds: req.Kinds, DefaultLeaseSeconds: s.o.DefaultLeaseSeconds, SpecBytes: runnerapi.MaxAnswerSpecBytes,
		MaxHeld: runnerapi.MaxHeldLeases, UnavailableImages: req.UnavailableImages, WaitSeconds: max(waitSeconds, 0),
		Free:    record.Claim{Cores: req.Free.Cores, MemoryMiB: req.Free.MemoryMiB, GPUs: req.Free.GPUs},
		Largest: record.Claim{Cores: req.Largest.Cores, MemoryMiB: req.Largest.MemoryMiB, GPUs: req.Largest.GPUs},
	}, req.Max)
}

// deliver answers a lease request with the jobs leased for it. When the
// request has already ended (the agent drained and stopped asking, or the
// connection dropped) or the answer cannot be written, the runner never
// sees these leases: they go back to the queue at once instead of waiting
// out their lease and costing each job a try. (An answer lost after it
// was written is beyond the server's sight; the lease expires as before.)
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, c caller, jobs []record.Job, leaseSeconds int) {
	if r.Context().Err() == nil {
		named := s.leaseNames(r.Context(), c.runner, jobs)
		out := make([]runnerapi.Lease, 0, len(jobs))
		for _, j := range jobs {
			// A job's organisation: its pool's, or the one that submitted
			// it to a platform pool.
			org := c.runner.OrganisationID
			if j.SubmittedFor != nil {
				org = j.SubmittedFor
			}
			l := runnerapi.Lease{
				LeaseID: j.ID.String(), Attempt: j.Attempt, Image: j.Image, Command: j.Command, Env: j.Env,
				Claim:            runnerapi.Resources{Cores: j.Claim.Cores, MemoryMiB: j.Claim.MemoryMiB, GPUs: j.Claim.GPUs},
				WallClockSeconds: j.Claim.WallClockSeconds, Kind: j.Kind, LeaseSeconds: leaseSeconds,
				Pool: named[j.PoolID], Network: j.Options.Network, WorkingDir: j.Options.WorkingDir, ScratchMiB: j.Options.ScratchMiB,
			}
			if org != nil {
				l.Organisation = named[*org]
			}
			l.Inputs, l.Outputs = s.presign(r.Context(), j, leaseSeconds)
			l.DataMiB = j.Options.DataMiB
			out = append(out, l)
		}
		writeJSON(w, http.StatusOK, runnerapi.LeaseResponse{Leases: out})
		// A writer that cannot flush leaves the answer to the server's
		// own flush at the end: it counts as delivered.
		if err := http.NewResponseController(w).Flush(); err == nil || errors.Is(err, http.ErrNotSupported) {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), claimTimeout)
	defer cancel()
	n, err := s.o.Store.ReturnUndelivered(ctx, c.runner.ID, jobs, "the runner's request ended before the answer")
	if err != nil {
		s.o.Log.Error("leases not delivered, and not given back: they expire", "runner", c.runner.ID, "leases", len(jobs), "err", err)
		return
	}
	s.o.Log.Info("leases not delivered: given back", "runner", c.runner.ID, "leases", n)
}

// leaseNames are the names of the jobs' pool and organisations.
func (s *Server) leaseNames(ctx context.Context, runner record.Runner, jobs []record.Job) map[uuid.UUID]string {
	orgs := []uuid.UUID{}
	if runner.OrganisationID != nil {
		orgs = append(orgs, *runner.OrganisationID)
	}
	for _, j := range jobs {
		if j.SubmittedFor != nil {
			orgs = append(orgs, *j.SubmittedFor)
		}
	}
	return s.names.of(ctx, []uuid.UUID{runner.PoolID}, orgs)
}

func leaseID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, runnerapi.CodeNotFound, "no such lease")
		return uuid.Nil, false
	}
	return id, true
}

// LogLimitNote is what the stored output of an attempt cut at the bound
// ends with.
var LogLimitNote = fmt.Sprintf("[runmesh: output beyond this point was not kept (%d MiB per attempt)]\n",
	runnerapi.MaxLogChunksPerAttempt*runnerapi.MaxLogChunk>>20)

// staleMessage says why a result was refused as stale.
const staleMessage = "this attempt is no longer the runner's: nothing was recorded"

func (s *Server) stale(w http.ResponseWriter) {
	writeError(w, http.StatusConflict, runnerapi.CodeStaleAttempt, staleMessage)
}

// logs stores a chunk of a lease's output, fenced by the attempt.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	c := callerFrom(r.Context())
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	var req runnerapi.LogUpload
	if !decode(w, r, &req) {
		return
	}
	if runnerapi.CheckAttempt(req.Attempt) != nil || req.Seq < 0 || req.Seq > math.MaxInt32 || len(req.Data) > runnerapi.MaxLogChunk {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("attempt 1 to %d, seq ≥ 0, data at most 32 KiB", runnerapi.MaxAttempt))
		return
	}
	seq, data, full := req.Seq, req.Data, req.Seq >= runnerapi.MaxLogChunksPerAttempt
	if full {
		// Past the bound: the note takes the first place past it (a
		// chunk stored before under a sequence number is kept, so it is
		// written once) and the chunk itself is dropped.
		seq, data = runnerapi.MaxLogChunksPerAttempt, []byte(LogLimitNote)
	}
	err := s.o.Store.AppendLog(r.Context(), id, req.Attempt, c.runner.ID, seq, data)
	switch {
	case errors.Is(err, store.ErrStaleAttempt):
		s.stale(w)
	case err != nil:
		s.internal(w, r, "logs", err)
	case full:
		writeError(w, http.StatusRequestEntityTooLarge, runnerapi.CodeLogLimit,
			fmt.Sprintf("this attempt's output is over the bound of %d chunks: nothing more of it is kept", runnerapi.MaxLogChunksPerAttempt))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// checkResult refuses a result that could not be true.
func checkResult(req runnerapi.ResultRequest) error {
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

func (s *Server) outcome(c caller, id uuid.UUID, req runnerapi.ResultRequest) record.Outcome {
	o := record.Outcome{
		JobID: id, Attempt: req.Attempt, RunnerID: c.runner.ID, ExitCode: req.ExitCode, ReturnReason: req.ReturnReason,
		HostFault: req.HostFault, OOM: req.OOM, PeakMemoryMiB: req.PeakMemoryMiB, ImageDigest: req.ImageDigest, RunnerVersion: req.RunnerVersion,
	}
	if len(req.Inputs) > 0 || len(req.Outputs) > 0 {
		o.Data = &record.RunData{Inputs: req.Inputs, Outputs: req.Outputs}
	}
	if o.RunnerVersion == nil {
		o.RunnerVersion = &c.runner.AgentVersion
	}
	return o
}

// result ends an attempt, fenced: a stale attempt gets 409 and changes
// nothing.
func (s *Server) result(w http.ResponseWriter, r *http.Request) {
	c := callerFrom(r.Context())
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	var req runnerapi.ResultRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxResultBodyBytes) {
		return
	}
	if err := checkResult(req); err != nil {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, err.Error())
		return
	}
	o := s.outcome(c, id, req)
	if err := s.checkOutputs(r.Context(), &o); err != nil {
		s.internal(w, r, "result", err)
		return
	}
	done, err := s.finisher.Finish(r.Context(), o)
	switch {
	case errors.Is(err, store.ErrStaleAttempt), errors.Is(err, record.ErrNotFound):
		s.stale(w)
	case err != nil:
		s.internal(w, r, "result", err)
	default:
		writeJSON(w, http.StatusOK, runnerapi.ResultResponse{State: string(done.State), AlreadyRecorded: done.AlreadyRecorded})
	}
}

// results ends several attempts in one transaction. A malformed result
// refuses the whole request (nothing is recorded); a stale one is answered
// stale_attempt on its own, and the others count.
func (s *Server) results(w http.ResponseWriter, r *http.Request) {
	c := callerFrom(r.Context())
	var req runnerapi.ResultsRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxResultsBodyBytes) {
		return
	}
	if len(req.Results) == 0 || len(req.Results) > runnerapi.MaxResultsPerRequest {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("results: 1 to %d", runnerapi.MaxResultsPerRequest))
		return
	}
	outcomes := make([]record.Outcome, len(req.Results))
	for i, res := range req.Results {
		id, err := uuid.Parse(res.LeaseID)
		if err != nil {
			writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("results[%d]: lease_id is not a lease", i))
			return
		}
		if err := checkResult(res.ResultRequest); err != nil {
			writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, fmt.Sprintf("results[%d]: %s", i, err))
			return
		}
		outcomes[i] = s.outcome(c, id, res.ResultRequest)
		if err := s.checkOutputs(r.Context(), &outcomes[i]); err != nil {
			s.internal(w, r, "results", err)
			return
		}
	}
	done, err := s.finisher.FinishAll(r.Context(), c.runner.ID, outcomes)
	if err != nil {
		s.internal(w, r, "results", err)
		return
	}
	out := runnerapi.ResultsResponse{Results: make([]runnerapi.ResultAnswer, len(done))}
	for i, d := range done {
		out.Results[i].LeaseID = req.Results[i].LeaseID
		if d.Err != nil {
			out.Results[i].Error = &runnerapi.ErrorBody{Code: runnerapi.CodeStaleAttempt, Message: staleMessage}
			continue
		}
		out.Results[i].State, out.Results[i].AlreadyRecorded = string(d.State), d.AlreadyRecorded
	}
	writeJSON(w, http.StatusOK, out)
}

// answerLeases extends the leases a heartbeat reports and says, of each,
// CONTINUE, CANCEL or GONE.
func (s *Server) answerLeases(r *http.Request, c caller, reported []runnerapi.HeldLease) ([]runnerapi.LeaseAnswer, error) {
	if len(reported) == 0 {
		return nil, nil
	}
	reports := make([]store.LeaseReport, 0, len(reported))
	for _, l := range reported {
		id, err := uuid.Parse(l.LeaseID)
		if err != nil {
			continue
		}
		reports = append(reports, store.LeaseReport{LeaseID: id, Attempt: l.Attempt, Phase: l.Phase})
	}
	held, err := s.o.Store.ExtendLeases(r.Context(), c.runner.ID, fleet.LeaseSeconds(c.runner, s.o.DefaultLeaseSeconds), reports)
	if err != nil {
		return nil, err
	}
	type key struct {
		id      string
		attempt int
	}
	still := map[key]store.HeldLease{}
	for _, h := range held {
		still[key{h.JobID.String(), h.Attempt}] = h
	}
	out := make([]runnerapi.LeaseAnswer, 0, len(reported))
	for _, l := range reported {
		a := runnerapi.LeaseAnswer{LeaseID: l.LeaseID, Attempt: l.Attempt, Action: runnerapi.LeaseGone}
		if h, ok := still[key{l.LeaseID, l.Attempt}]; ok {
			a.Action = runnerapi.LeaseContinue
			if h.CancelRequested {
				a.Action = runnerapi.LeaseCancel
			}
		}
		out = append(out, a)
	}
	return out, nil
}
