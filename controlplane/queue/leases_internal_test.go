package queue

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// A lease carries the job as submitted, the lease of its pool, and whose
// the job is: the pool's organisation, or the one that submitted it to a
// platform pool (none for the platform's own).
func TestALeaseCarriesTheJob(t *testing.T) {
	t.Parallel()
	own := 40
	d := newDesk(t, deskOptions{leaseSeconds: &own, leases: LeasesOptions{DefaultLeaseSeconds: 90}})
	j := d.submit(t, record.AllOrganisations(), func(s *Submission) {
		s.Command, s.Env = []string{"sh", "-c", "train"}, []EnvVar{{Name: "EPOCHS", Value: "3"}}
		s.Claim = record.Claim{Cores: 2, MemoryMiB: 1024, WallClockSeconds: 600}
		s.Options = record.JobOptions{Network: true, WorkingDir: "/work", ScratchMiB: 512}
	})
	got := d.leased(t, 1)
	require.Equal(t, runnerapi.Lease{
		LeaseID: j.ID.String(), Attempt: 1, Image: "busybox", Command: []string{"sh", "-c", "train"}, Env: map[string]string{"EPOCHS": "3"},
		Claim: runnerapi.Resources{Cores: 2, MemoryMiB: 1024}, WallClockSeconds: 600, Kind: "default", LeaseSeconds: 40,
		Organisation: d.org.Name, Pool: d.pool.Name, Network: true, WorkingDir: "/work", ScratchMiB: 512,
	}, got[0])

	p := newDesk(t, deskOptions{platform: true, leases: LeasesOptions{DefaultLeaseSeconds: 90}})
	mine := p.submit(t, record.OneOrganisation(p.org.ID), nil)
	platforms := p.submit(t, record.AllOrganisations(), func(s *Submission) { s.Priority = -1 })
	got = p.leased(t, 2)
	require.Equal(t, []string{mine.ID.String(), platforms.ID.String()}, []string{got[0].LeaseID, got[1].LeaseID})
	require.Equal(t, p.org.Name, got[0].Organisation, "submitted by an organisation to a platform pool")
	require.Empty(t, got[1].Organisation, "the platform's own")
	require.Equal(t, 90, got[0].LeaseSeconds, "a pool without its own lease")
	require.Equal(t, p.pool.Name, got[1].Pool)
}

// A request no agent sends is refused before anything is read; Max 0 is
// one lease.
func TestALeaseRequestIsChecked(t *testing.T) {
	t.Parallel()
	ok := runnerapi.LeaseRequest{Kinds: []string{"default"}, Max: 1}
	kinds := func(n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = "default"
		}
		return ks
	}
	for _, c := range []struct {
		name string
		f    func(*runnerapi.LeaseRequest)
		bad  bool
	}{
		{"one lease", nil, false},
		{"no max", func(r *runnerapi.LeaseRequest) { r.Max = 0 }, false},
		{"a negative max", func(r *runnerapi.LeaseRequest) { r.Max = -1 }, true},
		{"the most leases", func(r *runnerapi.LeaseRequest) { r.Max = runnerapi.MaxLeasesPerRequest }, false},
		{"past the most leases", func(r *runnerapi.LeaseRequest) { r.Max = runnerapi.MaxLeasesPerRequest + 1 }, true},
		{"no kind", func(r *runnerapi.LeaseRequest) { r.Kinds = nil }, true},
		{"the most kinds", func(r *runnerapi.LeaseRequest) { r.Kinds = kinds(runnerapi.MaxKinds) }, false},
		{"past the most kinds", func(r *runnerapi.LeaseRequest) { r.Kinds = kinds(runnerapi.MaxKinds + 1) }, true},
		{"a kind in capitals", func(r *runnerapi.LeaseRequest) { r.Kinds = []string{"default", "GPU"} }, true},
		{"the most images unavailable", func(r *runnerapi.LeaseRequest) { r.UnavailableImages = make([]string, 2*runnerapi.MaxPoolImages) }, false},
		{"past the most images unavailable", func(r *runnerapi.LeaseRequest) { r.UnavailableImages = make([]string, 2*runnerapi.MaxPoolImages+1) }, true},
		{"both interactive modes", func(r *runnerapi.LeaseRequest) { r.Stdio = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe} }, false},
		{"one interactive mode", func(r *runnerapi.LeaseRequest) { r.Stdio = []runnerapi.Stdio{runnerapi.StdioPipe} }, false},
		{"LOGS spelled out", func(r *runnerapi.LeaseRequest) { r.Stdio = []runnerapi.Stdio{"LOGS"} }, true},
		{"the zero mode named", func(r *runnerapi.LeaseRequest) { r.Stdio = []runnerapi.Stdio{runnerapi.StdioLogs} }, true},
		{"a mode that is none", func(r *runnerapi.LeaseRequest) { r.Stdio = []runnerapi.Stdio{"tty"} }, true},
		{"past the most modes", func(r *runnerapi.LeaseRequest) {
			r.Stdio = []runnerapi.Stdio{runnerapi.StdioTTY, runnerapi.StdioPipe, runnerapi.StdioTTY}
		}, true},
		{"nothing free", func(r *runnerapi.LeaseRequest) { r.Free = runnerapi.Resources{} }, false},
		{"negative free cores", func(r *runnerapi.LeaseRequest) { r.Free.Cores = -1 }, true},
		{"negative free memory", func(r *runnerapi.LeaseRequest) { r.Free.MemoryMiB = -1 }, true},
		{"negative free GPUs", func(r *runnerapi.LeaseRequest) { r.Free.GPUs = -1 }, true},
		{"largest cores not a number", func(r *runnerapi.LeaseRequest) { r.Largest.Cores = math.NaN() }, true},
		{"negative largest GPUs", func(r *runnerapi.LeaseRequest) { r.Largest.GPUs = -1 }, true},
	} {
		req := ok
		if c.f != nil {
			c.f(&req)
		}
		got, err := checkLeaseRequest(req)
		if c.bad {
			refusedWith(t, err, runnerapi.CodeBadRequest)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, max(req.Max, 1), got.Max, c.name)
	}

	_, err := checkLeaseRequest(runnerapi.LeaseRequest{Kinds: []string{"default"}, UnavailableImages: make([]string, 65)})
	require.EqualError(t, err, "bad_request: unavailable_images: at most 64")

	// Refused before anything: a desk whose store is not there answers.
	_, err = (&Leases{}).AskForWork(context.Background(), record.Runner{}, runnerapi.LeaseRequest{Max: -1})
	refusedWith(t, err, runnerapi.CodeBadRequest)
}

// Work goes only to the agent instance whose survivor check the server
// holds: another instance of the same runner, or a runner that sent no
// proof, is told to send one first.
func TestNoWorkBeforeTheSurvivorCheck(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	d.submit(t, record.AllOrganisations(), nil)
	req := d.request(1, 0)
	req.AgentInstance = uuid.NewString()
	_, err := d.ask(t, req)
	refusedWith(t, err, runnerapi.CodeRecoveryRequired)

	require.NoError(t, d.st.RecordRecovery(context.Background(), d.runner.ID, nil))
	_, err = d.ask(t, d.request(1, 0))
	refusedWith(t, err, runnerapi.CodeRecoveryRequired)
}

// With nothing to give, a request waits up to wait_seconds and gets an
// empty answer; a job submitted meanwhile in its pool wakes it.
func TestALongPollWaitsForWork(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	got, err := d.ask(t, d.request(1, 0))
	require.NoError(t, err)
	require.NotNil(t, got, "an answer, empty")
	require.Empty(t, got)
	got, err = d.ask(t, d.request(1, -5))
	require.NoError(t, err)
	require.Empty(t, got, "a negative wait is none")

	type answer struct {
		leases []runnerapi.Lease
		err    error
	}
	answered := make(chan answer, 1)
	start := time.Now()
	go func() {
		l, err := d.leases.AskForWork(context.Background(), d.runner, d.request(1, 30))
		answered <- answer{l, err}
	}()
	// Until it waits, or answered without waiting (which fails below).
	testutil.Eventually(t, 10*time.Second, func() bool { return d.waiting(t) == 1 || len(answered) > 0 }, "the runner waits")
	j := d.submit(t, record.AllOrganisations(), nil)
	select {
	case a := <-answered:
		require.NoError(t, a.err)
		require.Len(t, a.leases, 1)
		require.Equal(t, j.ID.String(), a.leases[0].LeaseID)
		require.Less(t, time.Since(start), 20*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the submission did not wake the long poll")
	}
}

// A request that ends while it waits gets nothing, and its runner waits
// no longer (runners that left jobs to it may take them); unless this
// replica is stopping: its runners ask another at once, which records them
// again.
func TestARequestGoneWaitsNoLonger(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cause   error
		waiting int
	}{{errors.New("the connection dropped"), 0}, {ErrStopping, 1}} {
		d := newDesk(t, deskOptions{})
		ctx, cancel := context.WithCancelCause(context.Background())
		ended := make(chan error, 1)
		go func() {
			_, err := d.leases.AskForWork(ctx, d.runner, d.request(1, 30))
			ended <- err
		}()
		testutil.Eventually(t, 10*time.Second, func() bool { return d.waiting(t) == 1 || len(ended) > 0 }, "the runner waits")
		cancel(c.cause)
		select {
		case err := <-ended:
			require.ErrorIs(t, err, c.cause)
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not end")
		}
		require.Equal(t, c.waiting, d.waiting(t), "%v", c.cause)
	}
}

// One runner holds at most MaxLeaseRequestsPerRunner requests on a
// replica; the next is refused until one ends. Other runners are counted
// apart, and a runner with none in flight is not remembered.
func TestFewLeaseRequestsPerRunner(t *testing.T) {
	t.Parallel()
	l := &Leases{waiting: map[uuid.UUID]int{}}
	a, b := uuid.New(), uuid.New()
	for range MaxLeaseRequestsPerRunner {
		require.True(t, l.startAsking(a))
	}
	require.False(t, l.startAsking(a))
	require.True(t, l.startAsking(b))
	_, err := l.AskForWork(context.Background(), record.Runner{ID: a}, runnerapi.LeaseRequest{Kinds: []string{"default"}})
	refusedWith(t, err, runnerapi.CodeTooMany)
	require.Equal(t, MaxLeaseRequestsPerRunner, l.waiting[a], "a refused request is not counted")
	l.stopAsking(a)
	require.True(t, l.startAsking(a))
	for range MaxLeaseRequestsPerRunner {
		l.stopAsking(a)
	}
	l.stopAsking(b)
	require.Empty(t, l.waiting)
}

// Jobs claimed for a request that ended before its answer go back to the
// queue at once, without costing a try; GiveBack does the same for leases
// whose answer could not be written, passing over ids that name no lease.
func TestLeasesNobodyHeardOfGoBack(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	j := d.submit(t, record.AllOrganisations(), nil)
	jobs, err := d.leases.claim(context.Background(), d.runner, d.request(1, 0), 0)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("the connection dropped")
	cancel(gone)
	got, err := d.leases.grant(ctx, d.runner, jobs)
	require.ErrorIs(t, err, gone)
	require.Nil(t, got)
	back := d.job(t, j.ID)
	require.Equal(t, record.JobQueued, back.State)
	require.Equal(t, 1, back.Undelivered)

	leases := d.leased(t, 1)
	d.leases.GiveBack(context.Background(), d.runner, []runnerapi.Lease{{LeaseID: "not a lease", Attempt: 1}, leases[0]})
	back = d.job(t, j.ID)
	require.Equal(t, record.JobQueued, back.State)
	require.Equal(t, 2, back.Undelivered)
}

// An attempt's output is stored chunk by chunk, fenced by the attempt;
// past the bound of chunks the note that says so takes the first place
// past it, once, and the runner is told.
func TestAppendOutput(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	j := d.submit(t, record.AllOrganisations(), nil)
	d.leased(t, 1)
	ctx := context.Background()
	appendOutput := func(attempt, seq int, data string) error {
		return d.leases.AppendOutput(ctx, d.runner, j.ID, runnerapi.LogUpload{Attempt: attempt, Seq: seq, Data: []byte(data)})
	}
	full := string(make([]byte, runnerapi.MaxLogChunk))
	for _, c := range []struct {
		name          string
		attempt, seq  int
		data          string
		code          string // "" when stored
		storedAs      int
		stored        string
		storedNothing bool
	}{
		{name: "the first chunk", attempt: 1, seq: 0, data: "hello\n", storedAs: 0, stored: "hello\n"},
		{name: "a full chunk", attempt: 1, seq: 1, data: full, storedAs: 1, stored: full},
		{name: "the last place", attempt: 1, seq: runnerapi.MaxLogChunksPerAttempt - 1, data: "last\n", storedAs: runnerapi.MaxLogChunksPerAttempt - 1, stored: "last\n"},
		{name: "past the bound", attempt: 1, seq: runnerapi.MaxLogChunksPerAttempt, data: "lost\n", code: runnerapi.CodeLogLimit,
			storedAs: runnerapi.MaxLogChunksPerAttempt, stored: LogLimitNote},
		{name: "further past it", attempt: 1, seq: math.MaxInt32, data: "lost\n", code: runnerapi.CodeLogLimit,
			storedAs: runnerapi.MaxLogChunksPerAttempt, stored: LogLimitNote},
		{name: "a chunk past 32 KiB", attempt: 1, seq: 2, data: full + "x", code: runnerapi.CodeBadRequest, storedNothing: true},
		{name: "a negative sequence", attempt: 1, seq: -1, data: "x", code: runnerapi.CodeBadRequest, storedNothing: true},
		{name: "a sequence past 32 bits", attempt: 1, seq: math.MaxInt32 + 1, data: "x", code: runnerapi.CodeBadRequest, storedNothing: true},
		{name: "no attempt", attempt: 0, seq: 2, data: "x", code: runnerapi.CodeBadRequest, storedNothing: true},
		{name: "another attempt", attempt: 2, seq: 2, data: "x", code: runnerapi.CodeStaleAttempt, storedNothing: true},
	} {
		err := appendOutput(c.attempt, c.seq, c.data)
		if c.code == "" {
			require.NoError(t, err, c.name)
		} else {
			refusedWith(t, err, c.code)
		}
		if c.storedNothing {
			continue
		}
		chunks, err := d.q.Logs(ctx, j.ID, 1, c.storedAs-1, 1)
		require.NoError(t, err)
		require.Len(t, chunks, 1, c.name)
		require.Equal(t, c.storedAs, chunks[0].Seq, c.name)
		require.Equal(t, c.stored, string(chunks[0].Data), c.name)
	}
	chunks, err := d.q.Logs(ctx, j.ID, 0, -1, 10)
	require.NoError(t, err)
	require.Len(t, chunks, 4, "nothing refused was stored")
	require.Equal(t, "[runmesh: output beyond this point was not kept (64 MiB per attempt)]\n", LogLimitNote)
}

// A session stream stands only for the attempt the runner holds, while
// it has not ended: another attempt, another job, an attempt out of range
// or an ended one is refused.
func TestASessionStreamIsFencedByAttempt(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskOptions{})
	j := d.submit(t, record.AllOrganisations(), nil)
	d.leased(t, 1)
	ctx := context.Background()
	require.NoError(t, d.leases.SessionStream(ctx, d.runner, j.ID, 1))
	refusedWith(t, d.leases.SessionStream(ctx, d.runner, j.ID, 2), runnerapi.CodeStaleAttempt)
	refusedWith(t, d.leases.SessionStream(ctx, d.runner, uuid.New(), 1), runnerapi.CodeStaleAttempt)
	refusedWith(t, d.leases.SessionStream(ctx, d.runner, j.ID, 0), runnerapi.CodeBadRequest)
	zero := 0
	_, err := d.leases.Result(ctx, d.runner, j.ID, runnerapi.ResultRequest{Attempt: 1, ExitCode: &zero})
	require.NoError(t, err)
	refusedWith(t, d.leases.SessionStream(ctx, d.runner, j.ID, 1), runnerapi.CodeStaleAttempt)
}
