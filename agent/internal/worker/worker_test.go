package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// These tests drive the worker's decisions against an in-memory runtime
// and control plane. The real ones (systemd, podman, the server) are
// exercised end to end by cmd/runmesh-agent's TestJobsInTheSandbox.

type fakeUnit struct {
	lease   string
	attempt int
	status  runtime.Status
}

type fakeRuntime struct {
	mu         sync.Mutex
	host       runtime.Host
	units      map[string]*fakeUnit
	containers map[string]runtime.Container
	stuck      map[string]bool // containers that refuse to go
	stopped    []string
	// images are the digests EnsureImage gives, and errors its refusals
	// (by reference); any other image is had as sha256:0123.
	images map[string]string
	pulled []string
	events chan runtime.ContainerEvent
	reads  map[string]int // Status calls, by unit
	// progress is what EnsureImage writes of a pull (by reference), before
	// it waits for release.
	progress map[string]string
	release  chan struct{}
}

func newRuntime(t *testing.T) *fakeRuntime {
	// Apart, as on a host: the survivor check clears the env directory of
	// files no held job owns.
	env, logs, data := t.TempDir(), t.TempDir(), t.TempDir()
	return &fakeRuntime{host: runtime.Host{Podman: "/usr/bin/podman", Cgroup: 2, EnvDir: env, LogDir: logs, DataDir: data},
		units: map[string]*fakeUnit{}, containers: map[string]runtime.Container{}, stuck: map[string]bool{}}
}

func (r *fakeRuntime) addUnit(lease string, attempt int) string {
	p := r.host.Paths(lease, attempt)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units[p.Unit] = &fakeUnit{lease: lease, attempt: attempt}
	r.containers[p.Container] = runtime.Container{Name: p.Container, LeaseID: lease, Attempt: attempt, State: "running"}
	return p.Unit
}

func (r *fakeRuntime) end(unit string, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.units[unit]
	u.status = runtime.Status{Ended: true, ExitCode: &code, Result: "success"}
	delete(r.containers, r.host.Paths(u.lease, u.attempt).Container)
}

func (r *fakeRuntime) readsOf(unit string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[unit]
}

func (r *fakeRuntime) has(unit string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.units[unit] != nil
}

func (r *fakeRuntime) Host() runtime.Host { return r.host }
func (r *fakeRuntime) EnsureImage(_ context.Context, image string, progress io.Writer) (string, error) {
	if p := r.progress[image]; p != "" && progress != nil {
		io.WriteString(progress, p)
		<-r.release
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pulled = append(r.pulled, image)
	switch d := r.images[image]; {
	case d == "":
		return "sha256:0123", nil
	case strings.HasPrefix(d, "sha256:"):
		return d, nil
	default:
		return "", errors.New(d)
	}
}

func (r *fakeRuntime) Start(_ context.Context, j runtime.Spec) (runtime.Unit, error) {
	u, err := runtime.Render(r.host, j)
	if err != nil {
		return u, err
	}
	r.addUnit(j.LeaseID, j.Attempt)
	return u, nil
}

func (r *fakeRuntime) Status(_ context.Context, unit string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads == nil {
		r.reads = map[string]int{}
	}
	r.reads[unit]++
	u := r.units[unit]
	if u == nil {
		return runtime.Status{}, runtime.ErrNoUnit
	}
	return u.status, nil
}

func (r *fakeRuntime) Stop(_ context.Context, unit string) error {
	r.mu.Lock()
	u := r.units[unit]
	r.stopped = append(r.stopped, unit)
	r.mu.Unlock()
	if u != nil && !u.status.Ended {
		r.end(unit, 143)
	}
	return nil
}

func (r *fakeRuntime) Forget(ctx context.Context, unit string) error {
	r.Stop(ctx, unit)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.units, unit)
	return nil
}

func (r *fakeRuntime) Survivors(context.Context) ([]runtime.Survivor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runtime.Survivor
	for name, u := range r.units {
		out = append(out, runtime.Survivor{Unit: name, LeaseID: u.lease, Attempt: u.attempt})
	}
	return out, nil
}

func (r *fakeRuntime) Containers(context.Context) ([]runtime.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runtime.Container
	for _, c := range r.containers {
		out = append(out, c)
	}
	return out, nil
}

func (r *fakeRuntime) RemoveContainer(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stuck[name] {
		return errors.New("device or resource busy")
	}
	delete(r.containers, name)
	return nil
}

// ContainerEvents gives the events sent on r.events (none unless a test
// makes the channel).
func (r *fakeRuntime) ContainerEvents(ctx context.Context, fn func(runtime.ContainerEvent)) error {
	r.mu.Lock()
	events := r.events
	r.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-events:
			fn(e)
		}
	}
}

type fakeAPI struct {
	mu          sync.Mutex
	leases      chan []runnerapi.Lease
	results     map[string]runnerapi.ResultRequest
	asked       chan runnerapi.LeaseRequest
	failResults int  // this many results fail with a 500 first
	failLogs    bool // output uploads fail with a 500
	logLimit    int  // from this sequence number on, uploads are refused with log_limit (0: never)
	logTries    int
	logs        []runnerapi.LogUpload // the uploads accepted
}

func newAPI() *fakeAPI {
	return &fakeAPI{leases: make(chan []runnerapi.Lease, 4), results: map[string]runnerapi.ResultRequest{}, asked: make(chan runnerapi.LeaseRequest, 16)}
}

func (a *fakeAPI) Lease(ctx context.Context, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error) {
	a.asked <- req
	select {
	case ls := <-a.leases:
		return ls, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *fakeAPI) UploadLog(_ context.Context, _ string, u runnerapi.LogUpload) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logTries++
	if a.failLogs {
		return &runnerclient.APIError{Status: 500, Code: runnerapi.CodeInternal, Msg: "internal error"}
	}
	if a.logLimit > 0 && u.Seq >= a.logLimit {
		return &runnerclient.APIError{Status: 413, Code: runnerapi.CodeLogLimit, Msg: "over the bound"}
	}
	a.logs = append(a.logs, u)
	return nil
}

func (a *fakeAPI) Result(_ context.Context, lease string, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
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

func newWorker(t *testing.T, rt *fakeRuntime, api *fakeAPI) *Worker {
	return &Worker{
		API: api, Runtime: rt, Kinds: []string{"default"}, Dir: t.TempDir(), Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 10 * time.Millisecond, Recheck: 10 * time.Millisecond,
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecoverAdoptsWhatTheServerWantsAndStopsTheRest(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	wanted := rt.addUnit("aaaaaaaa-0000-4000-8000-000000000001", 1)
	gone := rt.addUnit("aaaaaaaa-0000-4000-8000-000000000002", 2)
	rt.containers["runmesh-job-stray-1"] = runtime.Container{Name: "runmesh-job-stray-1", LeaseID: "stray", Attempt: 1}
	w := newWorker(t, rt, api)
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
	if !rt.has(wanted) || rt.has(gone) {
		t.Fatalf("units after the check: wanted %v, gone %v", rt.has(wanted), rt.has(gone))
	}
	if _, ok := rt.containers["runmesh-job-stray-1"]; ok {
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
	rt.end(wanted, 0)
	eventually(t, "the adopted job's result", func() bool {
		r, ok := api.result("aaaaaaaa-0000-4000-8000-000000000001")
		return ok && r.ExitCode != nil && *r.ExitCode == 0 && r.Attempt == 1
	})
	eventually(t, "the unit forgotten", func() bool { return !rt.has(wanted) })
}

func TestNotIsolatedWhileAStrayRuns(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	rt.containers["runmesh-job-stray-1"] = runtime.Container{Name: "runmesh-job-stray-1", LeaseID: "stray", Attempt: 1}
	rt.stuck["runmesh-job-stray-1"] = true
	w := newWorker(t, rt, api)
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
	if _, err := w.Recover(context.Background(), answer(w, nil)); err != nil {
		t.Fatal(err)
	}
	answer(w, nil)(context.Background())
	if !w.Ready() {
		t.Fatal("not ready")
	}
}

func TestLeasesRunAndObeyTheServer(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	w := newWorker(t, rt, api)
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
	unit := func(id string) string { return rt.host.Paths(id, 1).Unit }
	eventually(t, "three units", func() bool { return rt.has(unit(done)) && rt.has(unit(cancelled)) && rt.has(unit(gone)) })
	// What is held is booked: the next request offers what is left.
	if req := <-api.asked; req.Free.Cores != 2 {
		t.Fatalf("free cores %v with three 2-core jobs held", req.Free.Cores)
	}

	rt.end(unit(done), 3)
	answer(w, map[string]string{cancelled: runnerapi.LeaseCancel, gone: runnerapi.LeaseGone})(ctx)
	eventually(t, "the results", func() bool {
		_, ok1 := api.result(done)
		_, ok2 := api.result(cancelled)
		return ok1 && ok2 && !rt.has(unit(gone))
	})
	if r, _ := api.result(done); r.ExitCode == nil || *r.ExitCode != 3 || r.ImageDigest == nil || *r.ImageDigest != "sha256:0123" {
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
func runOne(t *testing.T, rt *fakeRuntime, api *fakeAPI, id string, mods ...func(*Worker)) runtime.Paths {
	t.Helper()
	w := newWorker(t, rt, api)
	for _, m := range mods {
		m(w)
	}
	ready(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
	<-api.asked
	api.leases <- []runnerapi.Lease{{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Claim: runnerapi.Resources{Cores: 1}}}
	p := rt.host.Paths(id, 1)
	eventually(t, "the unit", func() bool { return rt.has(p.Unit) })
	return p
}

// A result the server fails to take (a 500, a proxy's 502) is sent again,
// not dropped: the job cannot produce it twice.
func TestAResultIsSentUntilTheServerHasIt(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	api.failResults = 2
	const id = "cccccccc-0000-4000-8000-000000000001"
	unit := runOne(t, rt, api, id).Unit
	rt.end(unit, 0)
	// Retries back off from 1 s.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, ok := api.result(id); ok && r.ExitCode != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the result never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, "the unit forgotten after the result", func() bool { return !rt.has(unit) })
}

// Output is written down before it is sent: an agent that dies with an
// upload unanswered sends the very same chunk after its restart, under the
// same sequence number, however much the job wrote meanwhile.
func TestAnUnansweredChunkIsSentAgainUnchanged(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const lease = "aaaaaaaa-0000-4000-8000-000000000003"
	rt.addUnit(lease, 1)
	logPath := rt.host.Paths(lease, 1).Log
	write := func(s string) { appendTo(t, logPath, s) }
	write(criLine("stdout", "F", "first"))
	api.failLogs = true

	first := adoptThenDie(t, rt, api)
	write(criLine("stdout", "F", "second"))

	api.mu.Lock()
	api.failLogs = false
	api.mu.Unlock()
	again := newWorker(t, rt, api)
	again.Dir = first.Dir
	ctx2, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := again.Recover(ctx2, answer(again, nil)); err != nil {
		t.Fatal(err)
	}
	answer(again, nil)(ctx2)
	eventually(t, "both chunks accepted", func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.logs) >= 2
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	if got := api.logs[0]; got.Seq != 0 || string(got.Data) != "first\n" {
		t.Fatalf("first upload accepted: seq %d %q, want the unanswered chunk 0 unchanged", got.Seq, got.Data)
	}
	if got := api.logs[1]; got.Seq != 1 || string(got.Data) != "second\n" {
		t.Fatalf("second upload accepted: seq %d %q", got.Seq, got.Data)
	}
}

// adoptThenDie starts an agent that adopts what the runtime holds, waits
// until it has tried to send output, and stops it as a kill would: its
// directory stays for the next one.
func adoptThenDie(t *testing.T, rt *fakeRuntime, api *fakeAPI) *Worker {
	t.Helper()
	w := newWorker(t, rt, api)
	ctx, die := context.WithCancel(context.Background())
	if _, err := w.Recover(ctx, answer(w, nil)); err != nil {
		t.Fatal(err)
	}
	answer(w, nil)(ctx)
	eventually(t, "an upload tried", func() bool { return api.tries() > 0 })
	die()
	time.Sleep(50 * time.Millisecond) // its follower notices
	return w
}

// tries is how many output uploads were tried.
func (a *fakeAPI) tries() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logTries
}

// sendThenRefuse writes two records to a job's output, one at a time, and
// waits for the first upload (accepted) and the second (refused: the fake
// API's logLimit is 1).
func sendThenRefuse(t *testing.T, api *fakeAPI, log string) {
	t.Helper()
	appendTo(t, log, criLine("stdout", "F", "kept"))
	eventually(t, "chunk 0 sent", func() bool { return api.tries() == 1 })
	appendTo(t, log, criLine("stdout", "F", "refused"))
	eventually(t, "chunk 1 refused", func() bool { return api.tries() == 2 })
}

// Once the server keeps no more of an attempt's output, the agent stops
// sending it, however much more the job writes, and the job's result
// still goes out.
func TestOutputPastTheServersBoundIsNotSent(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	api.logLimit = 1
	const id = "dddddddd-0000-4000-8000-000000000001"
	p := runOne(t, rt, api, id)
	sendThenRefuse(t, api, p.Log)
	for i := range 5 {
		appendTo(t, p.Log, criLine("stdout", "F", fmt.Sprintf("more %d", i)))
		time.Sleep(30 * time.Millisecond) // three polls each
	}
	rt.end(p.Unit, 0)
	eventually(t, "the result", func() bool { _, ok := api.result(id); return ok })
	if n := api.tries(); n != 2 {
		t.Fatalf("%d uploads: after the refusal nothing more should be sent", n)
	}
}

// Output the server no longer takes is kept on the host up to a bound:
// past it the file is emptied, however much the job goes on writing.
func TestOutputNoOneTakesIsKeptSmallOnTheHost(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	api.logLimit = 1
	const id = "dddddddd-0000-4000-8000-000000000002"
	p := runOne(t, rt, api, id, func(w *Worker) { w.MaxLocalOutput = 4096 })
	size := func() int64 {
		st, err := os.Stat(p.Log)
		if err != nil {
			return -1
		}
		return st.Size()
	}
	sendThenRefuse(t, api, p.Log)
	line := criLine("stdout", "F", strings.Repeat("x", 500))
	for range 20 { // 10 KiB, more than twice the bound
		appendTo(t, p.Log, line)
	}
	eventually(t, "the file emptied", func() bool { return size() < 4096 })
	if size() < 0 {
		t.Fatal("the file itself is gone")
	}
	// Under the bound, what comes next stays (many polls later).
	kept := size() + 2*int64(len(line))
	appendTo(t, p.Log, line)
	appendTo(t, p.Log, line)
	time.Sleep(30 * 10 * time.Millisecond)
	if got := size(); got != kept {
		t.Fatalf("the file holds %d bytes, want %d", got, kept)
	}
}

// A job adopted without its lease record books an unknown share of the
// host (its GPUs included): no work is asked for until it ends.
func TestAnAdoptedJobWithoutItsRecordBooksTheHost(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const id = "eeeeeeee-0000-4000-8000-000000000001"
	unit := rt.addUnit(id, 1) // a unit, and no record of its lease
	w := newWorker(t, rt, api)
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
	rt.end(unit, 0)
	eventually(t, "its result", func() bool { _, ok := api.result(id); return ok })
	select {
	case <-api.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("no work asked for once it ended")
	}
}

// The record an adopted job of unknown claim gets once its output is sent
// does not make it known: after another restart it still books the host.
func TestAnUnknownJobStaysUnknownAcrossRestarts(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const id = "eeeeeeee-0000-4000-8000-000000000002"
	rt.addUnit(id, 1) // a unit, and no record of its lease
	appendTo(t, rt.host.Paths(id, 1).Log, criLine("stdout", "F", "out"))
	first := adoptThenDie(t, rt, api)

	again := newWorker(t, rt, api)
	again.Dir = first.Dir
	ready(t, again)
	ctx2, cancel := context.WithCancel(context.Background())
	defer cancel()
	go again.Run(ctx2)
	select {
	case req := <-api.asked:
		t.Fatalf("asked for work (%+v) while a job of unknown claim runs", req.Free)
	case <-time.After(300 * time.Millisecond):
	}
}

// Drained closes once a drained worker holds nothing: not while a job
// runs, at once when its result is in.
func TestDrainedOnceTheLastJobEnds(t *testing.T) {
	t.Parallel()
	rt, api := newRuntime(t), newAPI()
	const id = "ffffffff-0000-4000-8000-000000000001"
	var w *Worker
	p := runOne(t, rt, api, id, func(x *Worker) { w = x })
	w.Drain()
	select {
	case <-w.Drained():
		t.Fatal("drained while a job runs")
	case <-time.After(200 * time.Millisecond):
	}
	rt.end(p.Unit, 0)
	select {
	case <-w.Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after the last job ended")
	}
	if _, ok := api.result(id); !ok {
		t.Fatal("drained before the result was sent")
	}
}
