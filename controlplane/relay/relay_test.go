package relay_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// end is one side of an in-memory connection: what is written to it, its
// peer reads, one message at a time (unbuffered, as backpressure is).
type end struct {
	in     chan []byte
	peer   *end
	mu     sync.Mutex
	closed chan struct{}
	ends   []runnerapi.SessionEnd
}

func pipe() (*end, *end) { return bufferedPipe(0) }

// bufferedPipe holds up to n messages each way, as a network connection's
// buffers do.
func bufferedPipe(n int) (*end, *end) {
	a := &end{in: make(chan []byte, n), closed: make(chan struct{})}
	b := &end{in: make(chan []byte, n), closed: make(chan struct{})}
	a.peer, b.peer = b, a
	return a, b
}

func (e *end) Read() ([]byte, error) {
	select { // what arrived before a close is read first
	case m := <-e.in:
		return m, nil
	default:
	}
	select {
	case m := <-e.in:
		return m, nil
	case <-e.closed:
		return nil, io.EOF
	case <-e.peer.closed:
		return nil, io.EOF
	}
}

func (e *end) Write(msg []byte) error {
	select {
	case e.peer.in <- msg:
		return nil
	case <-e.closed:
		return io.ErrClosedPipe
	case <-e.peer.closed:
		return io.ErrClosedPipe
	}
}

func (e *end) Close(x runnerapi.SessionEnd) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ends = append(e.ends, x)
	select {
	case <-e.closed:
	default:
		close(e.closed)
	}
}

// ended is the first end the relay closed e's peer (its own side) with.
func (e *end) ended(t *testing.T) runnerapi.SessionEnd {
	t.Helper()
	select {
	case <-e.peer.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed")
	}
	e.peer.mu.Lock()
	defer e.peer.mu.Unlock()
	return e.peer.ends[0]
}

// wait is the session's summary, once it ended.
func wait(t *testing.T, sum <-chan relay.Summary) relay.Summary {
	t.Helper()
	select {
	case s := <-sum:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
	panic("unreachable")
}

func frame(t runnerapi.FrameType, s string) []byte { return runnerapi.AppendFrame(nil, t, []byte(s)) }

// recv reads the next frame from e (the test's side), failing the test on
// any other type.
func recv(t *testing.T, e *end, want runnerapi.FrameType) runnerapi.Frame {
	t.Helper()
	msg, err := e.Read()
	if err != nil {
		t.Fatalf("reading a %q frame: %v", want, err)
	}
	f, err := runnerapi.ParseFrame(msg)
	if err != nil || f.Type != want {
		t.Fatalf("frame %q %q (%v), want %q", f.Type, f.Payload, err, want)
	}
	return f
}

var bounds = relay.Bounds{SessionsPerJob: 2, SessionsPerRunner: 3, SessionsPerToken: 2, StandingPerLease: 2, StreamWait: 200 * time.Millisecond}

type fixture struct {
	hub   *relay.Hub
	lease relay.Lease
	token uuid.UUID
}

func newFixture() fixture {
	return fixture{hub: relay.NewHub(bounds), lease: relay.Lease{ID: uuid.New(), Attempt: 2, RunnerID: uuid.New()}, token: uuid.New()}
}

// stand gives the hub a standing stream for l; the agent's end is returned.
func (f fixture) stand(t *testing.T, l relay.Lease) *end {
	agent, server := pipe()
	go f.hub.Stand(context.Background(), l, server)
	return agent
}

// open starts a session; its summary arrives on the channel.
func (f fixture) open(ctx context.Context, l relay.Lease) (*end, <-chan relay.Summary) {
	person, server := pipe()
	out := make(chan relay.Summary, 1)
	go func() {
		out <- f.hub.Open(ctx, relay.Target{Lease: l, TokenID: f.token}, runnerapi.SessionOpen{ID: "s1", Kind: runnerapi.SessionAttach}, server)
	}()
	return person, out
}

func TestASessionPassesBytesBothWaysAndEndsWithTheProcess(t *testing.T) {
	f := newFixture()
	agent := f.stand(t, f.lease)
	person, sum := f.open(context.Background(), f.lease)

	var open runnerapi.SessionOpen
	if err := recv(t, agent, runnerapi.FrameOpen).Decode(&open); err != nil || open.ID != "s1" || open.Kind != "attach" {
		t.Fatalf("open %+v (%v)", open, err)
	}
	person.Write(frame(runnerapi.FrameStdin, "ls\r"))
	if p := recv(t, agent, runnerapi.FrameStdin).Payload; string(p) != "ls\r" {
		t.Fatalf("stdin %q", p)
	}
	person.Write(runnerapi.JSONFrame(runnerapi.FrameResize, runnerapi.Size{Cols: 100, Rows: 30}))
	recv(t, agent, runnerapi.FrameResize)
	agent.Write(frame(runnerapi.FrameStdout, "a b c\r\n"))
	if p := recv(t, person, runnerapi.FrameStdout).Payload; string(p) != "a b c\r\n" {
		t.Fatalf("stdout %q", p)
	}
	agent.Write(frame(runnerapi.FrameStderr, "oops"))
	recv(t, person, runnerapi.FrameStderr)
	code := 3
	agent.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Exit: &code, Code: runnerapi.EndExited, Reason: "exit status 3"}))
	got := wait(t, sum)
	if got.End.Code != runnerapi.EndExited || got.End.Exit == nil || *got.End.Exit != 3 || got.BytesIn != 3 || got.BytesOut != 11 {
		t.Fatalf("summary %+v", got)
	}
	if e := person.ended(t); e.Code != runnerapi.EndExited || *e.Exit != 3 {
		t.Fatalf("the person was told %+v", e)
	}
}

// A session finds the stream of the attempt the store names, and no other:
// a stream left from an earlier attempt is never used.
func TestAStaleAttemptsStreamIsNeverUsed(t *testing.T) {
	f := newFixture()
	old := f.lease
	old.Attempt = 1
	agent := f.stand(t, old)
	person, sum := f.open(context.Background(), f.lease)
	if got := wait(t, sum); got.End.Code != runnerapi.EndUnavailable {
		t.Fatalf("summary %+v, want unavailable", got)
	}
	if e := person.ended(t); e.Code != runnerapi.EndUnavailable {
		t.Fatalf("the person was told %+v", e)
	}
	select {
	case m := <-agent.in:
		t.Fatalf("the stale stream was sent %q", m)
	default:
	}
}

// A session waits a moment for a stream: the agent dials the next one as
// soon as one is taken.
func TestASessionWaitsForTheNextStream(t *testing.T) {
	f := newFixture()
	person, sum := f.open(context.Background(), f.lease)
	time.Sleep(50 * time.Millisecond)
	agent := f.stand(t, f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	person.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Code: runnerapi.EndDetached}))
	if got := wait(t, sum); got.End.Code != runnerapi.EndDetached {
		t.Fatalf("summary %+v", got)
	}
	if e := agent.ended(t); e.Code != runnerapi.EndDetached {
		t.Fatalf("the agent was told %+v, want detached (the job runs on)", e)
	}
}

func TestSessionsPastTheBoundsAreRefused(t *testing.T) {
	f := newFixture()
	for range bounds.SessionsPerJob {
		f.stand(t, f.lease)
		f.open(context.Background(), f.lease)
	}
	time.Sleep(50 * time.Millisecond)
	_, sum := f.open(context.Background(), f.lease)
	if got := wait(t, sum); got.End.Code != runnerapi.EndTooMany || got.End.CloseCode() != 4429 {
		t.Fatalf("a third session on the job: %+v", got)
	}
	// Standing streams are bounded per lease as well: of one more than
	// the bound, one is refused.
	var streams []*end
	for range bounds.StandingPerLease + 1 {
		streams = append(streams, f.stand(t, f.lease))
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		refused := 0
		for _, s := range streams {
			select {
			case <-s.peer.closed:
				if s.ended(t).Code != runnerapi.EndTooMany {
					t.Fatalf("a stream was told %+v", s.ended(t))
				}
				refused++
			default:
			}
		}
		return refused == 1
	}, "one stream past the bound refused")
}

func TestARevokedTokenEndsTheSession(t *testing.T) {
	f := newFixture()
	agent := f.stand(t, f.lease)
	ctx, cancel := context.WithCancelCause(context.Background())
	person, sum := f.open(ctx, f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	cancel(&relay.EndError{End: runnerapi.SessionEnd{Code: runnerapi.EndRevoked, Reason: "the token was revoked"}})
	if got := wait(t, sum); got.End.Code != runnerapi.EndRevoked {
		t.Fatalf("summary %+v", got)
	}
	if e := person.ended(t); e.CloseCode() != 4403 {
		t.Fatalf("the person was told %+v, want a 4403 close", e)
	}
	agent.ended(t)
}

func TestTheAgentGoingEndsTheSessionWithItsReason(t *testing.T) {
	f := newFixture()
	agent := f.stand(t, f.lease)
	person, sum := f.open(context.Background(), f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	agent.Close(runnerapi.SessionEnd{}) // the agent's connection breaks
	if got := wait(t, sum); got.End.Code != runnerapi.EndAgentGone {
		t.Fatalf("summary %+v", got)
	}
	if e := person.ended(t); !strings.Contains(e.Reason, "job runs on") {
		t.Fatalf("the person was told %+v", e)
	}
}

func TestBadFramesEndTheSession(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"too large", frame(runnerapi.FrameStdin, strings.Repeat("x", runnerapi.MaxFramePayload+1)), runnerapi.EndFrameTooLarge},
		{"unknown type", []byte("zz"), runnerapi.EndBadFrame},
		{"empty", nil, runnerapi.EndBadFrame},
		{"output from the person", frame(runnerapi.FrameStdout, "x"), runnerapi.EndBadFrame},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture()
			agent := f.stand(t, f.lease)
			person, sum := f.open(context.Background(), f.lease)
			recv(t, agent, runnerapi.FrameOpen)
			person.Write(c.msg)
			if got := wait(t, sum); got.End.Code != c.want || got.BytesIn != 0 {
				t.Fatalf("summary %+v, want %s", got, c.want)
			}
		})
	}
	// An agent speaking before a session opened is cut off.
	f := newFixture()
	agent := f.stand(t, f.lease)
	agent.Write(frame(runnerapi.FrameStdout, "hello"))
	if e := agent.ended(t); e.Code != runnerapi.EndBadFrame {
		t.Fatalf("the agent was told %+v", e)
	}
}

// A runner that may no longer hold streams (revoked, retired) loses them,
// and the sessions on them; a failed check (the database away) is no
// answer and ends nothing.
func TestARevokedRunnersStreamsEnd(t *testing.T) {
	f := newFixture()
	f.hub.Bounds.Recheck = 20 * time.Millisecond
	var mu sync.Mutex
	standing, checkErr := true, errors.New("database unreachable")
	f.lease.Standing = func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return standing, checkErr
	}
	agent := f.stand(t, f.lease)
	person, sum := f.open(context.Background(), f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	mu.Lock()
	standing = false // with an error: not an answer
	mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-person.peer.closed:
		t.Fatal("a failed check ended the session")
	default:
	}
	mu.Lock()
	checkErr = nil
	mu.Unlock()
	if got := wait(t, sum); got.End.Code != runnerapi.EndRevoked {
		t.Fatalf("summary %+v", got)
	}
	agent.ended(t)
}
