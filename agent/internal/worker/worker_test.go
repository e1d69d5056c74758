package worker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// These tests drive the worker's decisions against the runtime over an
// in-memory systemd and podman (runtimetest), and a control plane in
// memory. The real ones (systemd, podman, the server) are exercised end to
// end by cmd/runmesh-agent's TestJobsInTheSandbox.

type fakeAPI struct {
	mu          sync.Mutex
	leases      chan []runnerapi.Lease
	results     map[string]runnerapi.ResultRequest
	asked       chan runnerapi.LeaseRequest
	failResults int         // this many results fail with a 500 first
	failLeases  int         // this many requests for work fail with a 500 first
	resultsAt   []time.Time // when each result was sent, accepted or not
}

func newAPI() *fakeAPI {
	return &fakeAPI{leases: make(chan []runnerapi.Lease, 4), results: map[string]runnerapi.ResultRequest{}, asked: make(chan runnerapi.LeaseRequest, 16)}
}

func (a *fakeAPI) Lease(ctx context.Context, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error) {
	a.asked <- req
	a.mu.Lock()
	fail := a.failLeases > 0
	if fail {
		a.failLeases--
	}
	a.mu.Unlock()
	if fail {
		return nil, &runnerclient.APIError{Status: 500, Code: runnerapi.CodeInternal, Msg: "internal error"}
	}
	select {
	case ls := <-a.leases:
		return ls, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// UploadLog takes every chunk: the runtime's own tests check output.
func (a *fakeAPI) UploadLog(context.Context, string, runnerapi.LogUpload) error { return nil }

func (a *fakeAPI) Result(_ context.Context, lease string, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resultsAt = append(a.resultsAt, time.Now())
	if a.failResults > 0 {
		a.failResults--
		return runnerapi.ResultResponse{}, &runnerclient.APIError{Status: 500, Code: runnerapi.CodeInternal, Msg: "internal error"}
	}
	a.results[lease] = req
	return runnerapi.ResultResponse{State: "DONE"}, nil
}

func (a *fakeAPI) result(lease string) (runnerapi.ResultRequest, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.results[lease]
	return r, ok
}

func newWorker(t *testing.T, sys *runtimetest.System, api *fakeAPI) *Worker {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &Worker{
		API: api, Kinds: []string{"default"}, Version: "test", Log: discard,
		Runtime: &runtime.Runtime{System: sys, Conn: api, Dir: t.TempDir(), Log: discard, Poll: 10 * time.Millisecond, Recheck: 10 * time.Millisecond},
		Capacity: func() (runnerapi.Capacity, bool) {
			return runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 8, MemoryMiB: 16384}}, true
		},
	}
}

// answer plays the server's side of a heartbeat: each reported lease gets
// the action the test gives it, and a proof is recorded.
func answer(w *Worker, actions map[string]string) func(context.Context) error {
	return func(context.Context) error {
		resp := runnerapi.HeartbeatResponse{}
		for _, l := range w.Held() {
			a, ok := actions[l.LeaseID]
			if !ok {
				a = runnerapi.LeaseContinue
			}
			resp.Leases = append(resp.Leases, runnerapi.LeaseAnswer{LeaseID: l.LeaseID, Attempt: l.Attempt, Action: a})
		}
		proof := w.Recovery()
		resp.RecoveryRecorded = proof != nil
		w.Answer(resp, proof)
		return nil
	}
}

// eventually waits for cond, as long as a test here waits for anything.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, cond, what)
}

func TestRecoverAdoptsWhatTheServerWantsAndStopsTheRest(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	wanted := sys.AddUnit("aaaaaaaa-0000-4000-8000-000000000001", 1)
	gone := sys.AddUnit("aaaaaaaa-0000-4000-8000-000000000002", 2)
	sys.AddContainer(runtime.Container{Name: "runmesh-job-stray-1", LeaseID: "stray", Attempt: 1}, false)
	w := newWorker(t, sys, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beat := answer(w, map[string]string{"aaaaaaaa-0000-4000-8000-000000000002": runnerapi.LeaseGone})

	proof, err := w.Recover(ctx, beat)
	if err != nil {
		t.Fatal(err)
	}
	want := runnerapi.RecoveryProof{AgentInstance: w.Instance(), BootID: proof.BootID, SurvivorsChecked: true, SurvivorsFound: 3, Adopted: 1, Isolated: true}
	if proof != want {
		t.Fatalf("proof %+v, want %+v", proof, want)
	}
	if !sys.Has(wanted) || sys.Has(gone) {
		t.Fatalf("units after the check: wanted %v, gone %v", sys.Has(wanted), sys.Has(gone))
	}
	if sys.HasContainer("runmesh-job-stray-1") {
		t.Fatal("the stray container is still there")
	}
	if w.Ready() {
		t.Fatal("ready before the server recorded the proof")
	}
	beat(ctx)
	if !w.Ready() {
		t.Fatal("not ready once the proof is recorded")
	}
	// The adopted job is followed: its end is reported.
	sys.End(wanted, 0)
	eventually(t, "the adopted job's result", func() bool {
		r, ok := api.result("aaaaaaaa-0000-4000-8000-000000000001")
		return ok && r.ExitCode != nil && *r.ExitCode == 0 && r.Attempt == 1
	})
	eventually(t, "the unit forgotten", func() bool { return !sys.Has(wanted) })
}

func TestNotIsolatedWhileAStrayRuns(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	sys.AddContainer(runtime.Container{Name: "runmesh-job-stray-1", LeaseID: "stray", Attempt: 1}, true)
	w := newWorker(t, sys, api)
	proof, err := w.Recover(context.Background(), answer(w, nil))
	if err != nil {
		t.Fatal(err)
	}
	if proof.Isolated || !proof.SurvivorsChecked || proof.SurvivorsFound != 1 {
		t.Fatalf("proof %+v", proof)
	}
	answer(w, nil)(context.Background())
	if w.Ready() {
		t.Fatal("ready although a stray still runs")
	}
}

func ready(t *testing.T, w *Worker) {
	t.Helper()
	// What Recover starts (the watch of podman's events, the adopted jobs'
	// followers) ends with the test.
	if _, err := w.Recover(t.Context(), answer(w, nil)); err != nil {
		t.Fatal(err)
	}
	answer(w, nil)(t.Context())
	if !w.Ready() {
		t.Fatal("not ready")
	}
}

func TestLeasesRunAndObeyTheServer(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	w := newWorker(t, sys, api)
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		w.Run(ctx)
		close(stopped)
	}()

	lease := func(id string) runnerapi.Lease {
		return runnerapi.Lease{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Command: []string{"true"},
			Env: map[string]string{"TOKEN": "s3cret"}, Claim: runnerapi.Resources{Cores: 2}, WallClockSeconds: 60}
	}
	const done, cancelled, gone = "bbbbbbbb-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002", "bbbbbbbb-0000-4000-8000-000000000003"
	req := <-api.asked
	if req.AgentInstance != w.Instance() || req.Free.Cores != 8 {
		t.Fatalf("first request %+v", req)
	}
	api.leases <- []runnerapi.Lease{lease(done), lease(cancelled), lease(gone)}
	unit := func(id string) string { return sys.Host().Paths(id, 1).Unit }
	eventually(t, "three units", func() bool { return sys.Has(unit(done)) && sys.Has(unit(cancelled)) && sys.Has(unit(gone)) })
	// What is held is booked: the next request offers what is left.
	if req := <-api.asked; req.Free.Cores != 2 {
		t.Fatalf("free cores %v with three 2-core jobs held", req.Free.Cores)
	}

	sys.End(unit(done), 3)
	answer(w, map[string]string{cancelled: runnerapi.LeaseCancel, gone: runnerapi.LeaseGone})(ctx)
	eventually(t, "the results", func() bool {
		_, ok1 := api.result(done)
		_, ok2 := api.result(cancelled)
		return ok1 && ok2 && !sys.Has(unit(gone))
	})
	if r, _ := api.result(done); r.ExitCode == nil || *r.ExitCode != 3 || r.ImageDigest == nil || *r.ImageDigest != "sha256:0123" ||
		r.RunnerVersion == nil || *r.RunnerVersion != "test" || r.Attempt != 1 {
		t.Fatalf("result %+v", r)
	}
	if r, _ := api.result(cancelled); r.ReturnReason == nil || *r.ReturnReason != "cancelled" || r.HostFault {
		t.Fatalf("cancelled result %+v", r)
	}
	if _, ok := api.result(gone); ok {
		t.Fatal("a result was sent for a lease the server took back")
	}
	eventually(t, "nothing held", func() bool { return len(w.Held()) == 0 })
	if w.Idle() {
		t.Fatal("idle while a request for work is in flight")
	}

	// Drain: the request for work in flight (still waiting) ends, and Run
	// returns.
	w.Drain()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Drain")
	}
	if !w.Idle() {
		t.Fatal("drained, but not idle")
	}
}

// runOne starts a worker that is given one lease (attempt 1) and returns
// once its unit runs; the worker stops with the test.
func runOne(t *testing.T, sys *runtimetest.System, api *fakeAPI, id string, mods ...func(*Worker)) runtime.Paths {
	t.Helper()
	w := newWorker(t, sys, api)
	for _, m := range mods {
		m(w)
	}
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
	<-api.asked
	api.leases <- []runnerapi.Lease{{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Claim: runnerapi.Resources{Cores: 1}}}
	p := sys.Host().Paths(id, 1)
	eventually(t, "the unit", func() bool { return sys.Has(p.Unit) })
	return p
}

// A result the server fails to take (a 500, a proxy's 502) is sent again,
// not dropped: the job cannot produce it twice.
func TestAResultIsSentUntilTheServerHasIt(t *testing.T) {
	t.Parallel()
	// In a bubble: the retries' back-off (1 s, then 2 s) takes no time.
	synctest.Test(t, func(t *testing.T) {
		sys, api := runtimetest.New(t), newAPI()
		api.failResults = 2
		const id = "cccccccc-0000-4000-8000-000000000001"
		unit := runOne(t, sys, api, id).Unit
		sys.End(unit, 0)
		testutil.Eventually(t, 10*time.Second, func() bool {
			r, ok := api.result(id)
			return ok && r.ExitCode != nil
		}, "the result never arrived")
		eventually(t, "the unit forgotten after the result", func() bool { return !sys.Has(unit) })
	})
}

// A job adopted without its lease record books an unknown share of the
// host (its GPUs included): no work is asked for until it ends.
func TestAnAdoptedJobWithoutItsRecordBooksTheHost(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	const id = "eeeeeeee-0000-4000-8000-000000000001"
	unit := sys.AddUnit(id, 1) // a unit, and no record of its lease
	w := newWorker(t, sys, api)
	w.Capacity = func() (runnerapi.Capacity, bool) {
		return runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 8, MemoryMiB: 16384}, GPUs: []runnerapi.GPU{{UUID: "GPU-1", Healthy: true}}}, true
	}
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case req := <-api.asked:
		t.Fatalf("asked for work (%+v) while a job of unknown claim runs", req.Free)
	case <-time.After(300 * time.Millisecond):
	}
	if w.freeGPUs(1) != nil {
		t.Fatal("a GPU handed out while a job that may use it runs")
	}
	sys.End(unit, 0)
	eventually(t, "its result", func() bool { _, ok := api.result(id); return ok })
	select {
	case <-api.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("no work asked for once it ended")
	}
}

// Drained closes once a drained worker holds nothing: not while a job
// runs, at once when its result is in.
func TestDrainedOnceTheLastJobEnds(t *testing.T) {
	t.Parallel()
	sys, api := runtimetest.New(t), newAPI()
	const id = "ffffffff-0000-4000-8000-000000000001"
	var w *Worker
	p := runOne(t, sys, api, id, func(x *Worker) { w = x })
	w.Drain()
	select {
	case <-w.Drained():
		t.Fatal("drained while a job runs")
	case <-time.After(200 * time.Millisecond):
	}
	sys.End(p.Unit, 0)
	select {
	case <-w.Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after the last job ended")
	}
	if _, ok := api.result(id); !ok {
		t.Fatal("drained before the result was sent")
	}
}

// Asking for work names the interactive modes the runtime runs: the server
// leases a TTY or PIPE job only to an agent that names its mode.
func TestAskingForWorkNamesTheInteractiveModes(t *testing.T) {
	t.Parallel()
	w := newWorker(t, runtimetest.New(t), newAPI())
	req, ok := w.request()
	if !ok {
		t.Fatal("no request with room free")
	}
	if want := []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe}; !slices.Equal(req.Stdio, want) {
		t.Fatalf("stdio %v, want %v", req.Stdio, want)
	}
}
