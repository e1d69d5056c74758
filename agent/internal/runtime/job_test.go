package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// These tests drive a job's life against systemd and podman in memory
// (runtimetest) and a control plane that takes output. The real ones are
// exercised by the tests that run in agent/sandbox, and end to end by
// cmd/runmesh-agent's TestJobsInTheSandbox.

// fakeConn takes a job's output, or refuses it as the server would.
type fakeConn struct {
	mu    sync.Mutex
	fail  bool // uploads fail with a 500
	limit int  // from this sequence number on, uploads are refused with log_limit (0: never)
	tries int
	logs  []runnerapi.LogUpload // the uploads accepted
}

func (c *fakeConn) UploadLog(_ context.Context, _ string, u runnerapi.LogUpload) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tries++
	if c.fail {
		return &runnerapi.ErrorBody{Code: runnerapi.CodeInternal, Message: "internal error"}
	}
	if c.limit > 0 && u.Seq >= c.limit {
		return &runnerapi.ErrorBody{Code: runnerapi.CodeLogLimit, Message: "over the bound"}
	}
	c.logs = append(c.logs, u)
	return nil
}

// tried is how many uploads were tried.
func (c *fakeConn) tried() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries
}

func (c *fakeConn) accepted() []runnerapi.LogUpload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]runnerapi.LogUpload(nil), c.logs...)
}

func newRuntime(t *testing.T, sys *runtimetest.System, conn runtime.Conn) *runtime.Runtime {
	return &runtime.Runtime{System: sys, Conn: conn, Dir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Poll: 10 * time.Millisecond, Recheck: 10 * time.Millisecond}
}

func lease(id string) runnerapi.Lease {
	return runnerapi.Lease{LeaseID: id, Attempt: 1, Image: "localhost/busybox:latest", Claim: runnerapi.Resources{Cores: 1}}
}

// followed is how a Follow ended.
type followed struct {
	res runnerapi.ResultRequest
	how runtime.Outcome
}

// launch takes a lease, launches its job and follows it in the background
// until the test ends: how that ended comes on the channel.
func launch(t *testing.T, r *runtime.Runtime, l runnerapi.Lease) (*runtime.Job, <-chan followed) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	j := r.Take(l, nil)
	if err := j.Save(); err != nil {
		t.Fatal(err)
	}
	if res, ok := j.Launch(ctx, l.Env); !ok {
		t.Fatalf("not launched: %s", *res.ReturnReason)
	}
	done := make(chan followed, 1)
	go func() {
		res, how := j.Follow(ctx)
		done <- followed{res, how}
	}()
	return j, done
}

// ended waits for a Follow to end.
func ended(t *testing.T, done <-chan followed) followed {
	t.Helper()
	select {
	case f := <-done:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("the job was not done with within 5 s")
		return followed{}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, cond, what)
}

// writeOutput adds a line of output to a job's log, as conmon writes it.
func writeOutput(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("2026-11-30T12:00:00.000000000+00:00 stdout F " + line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// adoptThenDie follows every job an earlier agent left, as a restarted
// agent's runtime would, until cond, then stops as a kill would: once it
// returns, no follower of its is left, and its directory stays for the
// next one.
func adoptThenDie(t *testing.T, r *runtime.Runtime, cond func() bool) {
	t.Helper()
	ctx, die := context.WithCancel(context.Background())
	defer die()
	jobs, _, err := r.Survivors(ctx)
	if err != nil || len(jobs) == 0 {
		t.Fatalf("survivors %v, %v", jobs, err)
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.Follow(ctx) })
	}
	eventually(t, "the condition before the kill", cond)
	die()
	wg.Wait()
}

// Output is written down before it is sent: an agent that dies with an
// upload unanswered sends the very same chunk after its restart, under the
// same sequence number, however much the job wrote meanwhile.
func TestAnUnansweredChunkIsSentAgainUnchanged(t *testing.T) {
	t.Parallel()
	sys, conn := runtimetest.New(t), &fakeConn{fail: true}
	const id = "aaaaaaaa-0000-4000-8000-000000000003"
	sys.AddUnit(id, 1)
	logPath := sys.Host().Paths(id, 1).Log
	writeOutput(t, logPath, "first")
	first := newRuntime(t, sys, conn)
	adoptThenDie(t, first, func() bool { return conn.tried() > 0 })
	writeOutput(t, logPath, "second")

	conn.mu.Lock()
	conn.fail = false
	conn.mu.Unlock()
	again := newRuntime(t, sys, conn)
	again.Dir = first.Dir
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs, _, err := again.Survivors(ctx)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("survivors %v, %v", jobs, err)
	}
	go jobs[0].Follow(ctx)
	eventually(t, "both chunks accepted", func() bool { return len(conn.accepted()) >= 2 })
	logs := conn.accepted()
	if got := logs[0]; got.Seq != 0 || string(got.Data) != "first\n" {
		t.Fatalf("first upload accepted: seq %d %q, want the unanswered chunk 0 unchanged", got.Seq, got.Data)
	}
	if got := logs[1]; got.Seq != 1 || string(got.Data) != "second\n" {
		t.Fatalf("second upload accepted: seq %d %q", got.Seq, got.Data)
	}
}

// The record an adopted job of unknown claim gets once its output is sent
// does not make it known: after another restart it still books the host.
func TestAnUnknownJobStaysUnknownAcrossRestarts(t *testing.T) {
	t.Parallel()
	sys, conn := runtimetest.New(t), &fakeConn{}
	const id = "eeeeeeee-0000-4000-8000-000000000002"
	sys.AddUnit(id, 1) // a unit, and no record of its lease
	p := sys.Host().Paths(id, 1)
	writeOutput(t, p.Log, "out")
	first := newRuntime(t, sys, conn)
	adoptThenDie(t, first, func() bool { return len(conn.accepted()) > 0 })
	if _, err := os.Stat(filepath.Join(first.Dir, p.Container+".json")); err != nil {
		t.Fatalf("no record once its output was sent: %v", err)
	}

	again := newRuntime(t, sys, conn)
	again.Dir = first.Dir
	jobs, _, err := again.Survivors(context.Background())
	if err != nil || len(jobs) != 1 {
		t.Fatalf("survivors %v, %v", jobs, err)
	}
	if !jobs[0].UnknownClaim() {
		t.Fatalf("adopted again as %+v: its claim is not known", jobs[0].Lease())
	}
}

// sendThenRefuse writes two records to a job's output, one at a time, and
// waits for the first upload (accepted) and the second (refused: the fake
// conn's limit is 1).
func sendThenRefuse(t *testing.T, conn *fakeConn, log string) {
	t.Helper()
	writeOutput(t, log, "kept")
	eventually(t, "chunk 0 sent", func() bool { return conn.tried() == 1 })
	writeOutput(t, log, "refused")
	eventually(t, "chunk 1 refused", func() bool { return conn.tried() == 2 })
}

// Once the server keeps no more of an attempt's output, the agent stops
// sending it, however much more the job writes, and the job's result
// still comes.
func TestOutputPastTheServersBoundIsNotSent(t *testing.T) {
	t.Parallel()
	sys, conn := runtimetest.New(t), &fakeConn{limit: 1}
	const id = "dddddddd-0000-4000-8000-000000000001"
	_, done := launch(t, newRuntime(t, sys, conn), lease(id))
	p := sys.Host().Paths(id, 1)
	sendThenRefuse(t, conn, p.Log)
	for i := range 5 {
		writeOutput(t, p.Log, fmt.Sprintf("more %d", i))
		time.Sleep(30 * time.Millisecond) // three polls each, in which nothing may be sent
	}
	sys.End(p.Unit, 0)
	if f := ended(t, done); f.how != runtime.Finished || f.res.ExitCode == nil {
		t.Fatalf("followed to %+v", f)
	}
	if n := conn.tried(); n != 2 {
		t.Fatalf("%d uploads: after the refusal nothing more should be sent", n)
	}
}

// Output the server no longer takes is kept on the host up to a bound:
// past it the file is emptied, however much the job goes on writing.
func TestOutputNoOneTakesIsKeptSmallOnTheHost(t *testing.T) {
	t.Parallel()
	sys, conn := runtimetest.New(t), &fakeConn{limit: 1}
	r := newRuntime(t, sys, conn)
	r.MaxLocalOutput = 4096
	const id = "dddddddd-0000-4000-8000-000000000002"
	launch(t, r, lease(id))
	p := sys.Host().Paths(id, 1)
	size := func() int64 {
		st, err := os.Stat(p.Log)
		if err != nil {
			return -1
		}
		return st.Size()
	}
	sendThenRefuse(t, conn, p.Log)
	line := strings.Repeat("x", 500)
	for range 20 { // 10 KiB, more than twice the bound
		writeOutput(t, p.Log, line)
	}
	eventually(t, "the file emptied", func() bool { return size() < 4096 })
	if size() < 0 {
		t.Fatal("the file itself is gone")
	}
	// Under the bound, what comes next stays (many polls later).
	writeOutput(t, p.Log, line)
	writeOutput(t, p.Log, line)
	kept := size()
	time.Sleep(30 * 10 * time.Millisecond) // thirty polls, in which it may not be emptied
	if got := size(); got != kept {
		t.Fatalf("the file holds %d bytes, want %d", got, kept)
	}
}

// A job cancelled by the server is stopped, and its result says so; a job
// whose lease is lost is stopped and reported by no one.
func TestACancelledJobSaysSoAndALostOneNothing(t *testing.T) {
	t.Parallel()
	sys := runtimetest.New(t)
	r := newRuntime(t, sys, &fakeConn{})
	const cancelled, lost = "bbbbbbbb-0000-4000-8000-000000000002", "bbbbbbbb-0000-4000-8000-000000000003"
	c, cdone := launch(t, r, lease(cancelled))
	l, ldone := launch(t, r, lease(lost))
	c.Cancel()
	l.LeaseLost()
	if f := ended(t, cdone); f.how != runtime.Finished || f.res.ReturnReason == nil || *f.res.ReturnReason != "cancelled" || f.res.HostFault {
		t.Fatalf("cancelled: %+v", f)
	}
	if f := ended(t, ldone); f.how != runtime.Abandoned {
		t.Fatalf("lost: %+v", f)
	}
	for _, j := range []*runtime.Job{c, l} {
		j.End(context.Background())
		if sys.Has(j.Unit()) {
			t.Fatalf("%s is still there after End", j.Unit())
		}
	}
}

// An interactive job's output is never sent: nothing is read from a file,
// even one where a batch job's log would be, and its end is reported as
// any job's. A mode this agent does not know is given back, the job's
// fault, and never run as a batch job.
func TestAnInteractiveJobSendsNoOutput(t *testing.T) {
	t.Parallel()
	sys, conn := runtimetest.New(t), &fakeConn{}
	r := newRuntime(t, sys, conn)
	const id = "aaaaaaaa-0000-4000-8000-0000000000a1"
	l := lease(id)
	l.Stdio = runnerapi.StdioTTY
	writeOutput(t, sys.Host().Paths(id, 1).Log, "typed at the terminal")
	j, done := launch(t, r, l)
	// Each read of the unit is a step of the follower, which sends a batch
	// job's output.
	eventually(t, "the follower's steps", func() bool { return sys.ReadsOf(j.Unit()) >= 3 })
	sys.End(j.Unit(), 0)
	f := ended(t, done)
	if f.how != runtime.Finished || f.res.ExitCode == nil || *f.res.ExitCode != 0 {
		t.Fatalf("ended %v with %+v", f.how, f.res)
	}
	if n := conn.tried(); n != 0 {
		t.Fatalf("%d uploads of an interactive job's output", n)
	}

	odd := lease("aaaaaaaa-0000-4000-8000-0000000000a2")
	odd.Stdio = "RAW"
	res, ok := r.Take(odd, nil).Launch(context.Background(), nil)
	if ok || res.ReturnReason == nil || res.HostFault || !strings.Contains(*res.ReturnReason, `stdio "RAW"`) {
		t.Fatalf("a mode the agent does not know: launched %v, %+v", ok, res)
	}
}
