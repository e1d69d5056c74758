package relay_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/runnerapi"
)

// lender is another replica, reached in memory: Take asks its hub to
// lend the lease's stream over a fresh pipe, as relay.Peers does over
// mutual TLS. link is the last pipe's end on the asking side.
type lender struct {
	hub   *relay.Hub
	dead  atomic.Bool // it died: it sends nothing more
	asked chan struct{}
	links chan *end
}

func newLender(b relay.Bounds) *lender {
	return &lender{hub: relay.NewHub(b), asked: make(chan struct{}, 100), links: make(chan *end, 10)}
}

func (l *lender) Take(ctx context.Context, lease uuid.UUID, attempt int) (relay.Conn, error) {
	l.asked <- struct{}{}
	here, there := bufferedPipe(16)
	upgraded := make(chan bool, 1)
	go func() {
		// The other replica's session lives by its own request, not by
		// the asking (which ctx bounds).
		lent := l.hub.Lend(context.Background(), lease, attempt, func() (relay.Conn, error) {
			upgraded <- true
			return closeSays{there, l}, nil
		})
		if !lent {
			upgraded <- false
		}
	}()
	if !<-upgraded {
		return nil, nil
	}
	l.links <- here
	return here, nil
}

// closeSays is a connection whose Close sends the end as its last frame,
// as relay.WebSocket's does.
type closeSays struct {
	*end
	l *lender
}

func (c closeSays) Close(x runnerapi.SessionEnd) {
	if !c.l.dead.Load() {
		select {
		case c.peer.in <- runnerapi.JSONFrame(runnerapi.FrameEnd, x):
		default:
		}
	}
	c.end.Close(x)
}

// twoReplicas: the person on f.hub, the agent's stream on the lender's.
func twoReplicas() (fixture, *lender) {
	f := newFixture()
	other := newLender(bounds)
	f.hub.Elsewhere = other
	return f, other
}

func (l *lender) stand(lease relay.Lease) *end {
	agent, server := pipe()
	go l.hub.Stand(context.Background(), lease, server)
	return agent
}

func TestASessionCrossesToTheReplicaHoldingTheStream(t *testing.T) {
	f, other := twoReplicas()
	agent := other.stand(f.lease)
	person, sum := f.open(context.Background(), f.lease)

	var open runnerapi.SessionOpen
	if err := recv(t, agent, runnerapi.FrameOpen).Decode(&open); err != nil || open.ID != "s1" {
		t.Fatalf("the agent on the other replica was told to open %+v (%v)", open, err)
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
	code := 3
	agent.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Exit: &code, Code: runnerapi.EndExited, Reason: "exit status 3"}))
	got := wait(t, sum)
	if got.End.Code != runnerapi.EndExited || got.End.Exit == nil || *got.End.Exit != 3 || got.BytesIn != 3 || got.BytesOut != 7 {
		t.Fatalf("summary %+v", got)
	}
	if e := person.ended(t); e.Code != runnerapi.EndExited || *e.Exit != 3 {
		t.Fatalf("the person was told %+v", e)
	}
}

// A person who detaches on one replica leaves the job running on the
// other: the agent is told detached, not that anything broke.
func TestADetachCrossesReplicas(t *testing.T) {
	f, other := twoReplicas()
	agent := other.stand(f.lease)
	person, sum := f.open(context.Background(), f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	person.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Code: runnerapi.EndDetached}))
	if got := wait(t, sum); got.End.Code != runnerapi.EndDetached {
		t.Fatalf("summary %+v", got)
	}
	if e := agent.ended(t); e.Code != runnerapi.EndDetached {
		t.Fatalf("the agent was told %+v", e)
	}
}

// The replica holding the agent's stream dies mid-session: the person is
// told so, with server_gone, and not that the job ended.
func TestTheLendingReplicaGoingEndsTheSession(t *testing.T) {
	f, other := twoReplicas()
	agent := other.stand(f.lease)
	person, sum := f.open(context.Background(), f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	link := <-other.links
	other.dead.Store(true)
	link.peer.Close(runnerapi.SessionEnd{}) // the other replica dies, and its connection with it
	got := wait(t, sum)
	if got.End.Code != runnerapi.EndServerGone || !strings.Contains(got.End.Reason, "replica") {
		t.Fatalf("summary %+v", got)
	}
	if e := person.ended(t); e.Code != runnerapi.EndServerGone {
		t.Fatalf("the person was told %+v", e)
	}
}

// The agent dials its next stream to whichever replica its connection
// lands on: a session waiting on one replica finds a stream that arrives
// on the other.
func TestASessionFindsAStreamThatArrivesOnAnotherReplica(t *testing.T) {
	f, other := twoReplicas()
	f.hub.Bounds.StreamWait = 2 * time.Second
	person, sum := f.open(context.Background(), f.lease)
	<-other.asked // asked once, and none stood there
	agent := other.stand(f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	person.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Code: runnerapi.EndDetached}))
	if got := wait(t, sum); got.End.Code != runnerapi.EndDetached {
		t.Fatalf("summary %+v", got)
	}
}

// A replica lends only what stands on it, for the attempt asked: none is
// false, and nothing is upgraded.
func TestLendWithoutAStreamChangesNothing(t *testing.T) {
	f, other := twoReplicas()
	old := f.lease
	old.Attempt = 1
	agent := other.stand(old)
	time.Sleep(20 * time.Millisecond)
	lent := other.hub.Lend(context.Background(), f.lease.ID, f.lease.Attempt, func() (relay.Conn, error) {
		t.Fatal("upgraded without a stream")
		return nil, nil
	})
	if lent {
		t.Fatal("lent a stream of another attempt")
	}
	select {
	case m := <-agent.in:
		t.Fatalf("the stale stream was sent %q", m)
	default:
	}
}

// The lending replica counts the job's and the runner's sessions too: one
// past its bound is refused, and the stream stays for the next session.
func TestALendingReplicaKeepsTheJobsBound(t *testing.T) {
	f, other := twoReplicas()
	other.hub.Bounds.SessionsPerJob = 0
	agent := other.stand(f.lease)
	time.Sleep(20 * time.Millisecond)
	_, sum := f.open(context.Background(), f.lease)
	if got := wait(t, sum); got.End.Code != runnerapi.EndTooMany {
		t.Fatalf("summary %+v, want too_many", got)
	}
	other.hub.Bounds.SessionsPerJob = 1
	_, sum = f.open(context.Background(), f.lease)
	recv(t, agent, runnerapi.FrameOpen)
	agent.Write(runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Code: runnerapi.EndExited}))
	if got := wait(t, sum); got.End.Code != runnerapi.EndExited {
		t.Fatalf("summary %+v: the stream was not put back", got)
	}
}

// stuck is a replica listed but gone: asking it waits until told to stop.
type stuck struct{}

func (stuck) Take(ctx context.Context, _ uuid.UUID, _ int) (relay.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A session does not wait past StreamWait for a replica that does not
// answer.
func TestAnUnansweringReplicaDoesNotHoldTheSessionPastItsWait(t *testing.T) {
	f := newFixture()
	f.hub.Elsewhere = stuck{}
	start := time.Now()
	_, sum := f.open(context.Background(), f.lease)
	if got := wait(t, sum); got.End.Code != runnerapi.EndUnavailable {
		t.Fatalf("summary %+v", got)
	}
	if took := time.Since(start); took > bounds.StreamWait+time.Second {
		t.Fatalf("refused after %v, with a wait of %v", took, bounds.StreamWait)
	}
}
