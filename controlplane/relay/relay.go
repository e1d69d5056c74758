// Package relay joins a person's session (attach, exec) on a running job
// with a stream the job's agent dialled out: the control plane never opens
// a connection into a runner. An agent holds a standing stream per lease it
// runs (runnerapi.PathSession); a session takes one, and the agent dials
// the next. The relay passes frames, one at a time each way: it keeps no
// byte, and a side that stops reading stops the other from writing.
//
// A person's socket and the agent's stream may land on different
// replicas: the replica holding the person's socket asks the others
// (Elsewhere) and one lends it the stream (Lend), relaying between the
// two replicas as between a person and an agent. docs/architecture.md
// says why replicas talk to each other rather than ask the agent to dial.
package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/runnerapi"
)

// Conn is one side's connection: one frame a message. Write is safe for
// concurrent use; Close ends the connection with the end's code (a
// WebSocket's close code and reason), after sending it as the last frame
// where the connection is still open.
type Conn interface {
	Read() ([]byte, error)
	Write(msg []byte) error
	Close(end runnerapi.SessionEnd)
}

// Bounds are the relay's limits (docs/security.md).
type Bounds struct {
	SessionsPerJob    int
	SessionsPerRunner int
	SessionsPerToken  int
	// StandingPerLease bounds an agent's standing streams for one lease.
	StandingPerLease int
	// StreamWait is how long a session waits for its agent's stream (one
	// that was just taken is dialled again within a moment).
	StreamWait time.Duration
	// Recheck is how often a stream's runner is asked again whether it
	// may hold streams (Lease.Standing).
	Recheck time.Duration
}

// DefaultBounds are the server's.
var DefaultBounds = Bounds{SessionsPerJob: 4, SessionsPerRunner: 16, SessionsPerToken: 8, StandingPerLease: 2, StreamWait: 5 * time.Second,
	Recheck: 10 * time.Second}

// Hub pairs sessions with standing streams on this replica.
type Hub struct {
	Bounds Bounds
	// Elsewhere finds a lease's stream on the other replicas (nil: this
	// replica is the only one).
	Elsewhere Elsewhere

	mu       sync.Mutex
	standing map[streamKey][]*stream
	arrived  map[streamKey]chan struct{} // closed when a stream stands for the key
	perJob   map[uuid.UUID]int
	perRun   map[uuid.UUID]int
	perToken map[uuid.UUID]int
}

// NewHub is a hub with bounds b.
func NewHub(b Bounds) *Hub {
	return &Hub{Bounds: b, standing: map[streamKey][]*stream{}, arrived: map[streamKey]chan struct{}{},
		perJob: map[uuid.UUID]int{}, perRun: map[uuid.UUID]int{}, perToken: map[uuid.UUID]int{}}
}

type streamKey struct {
	lease   uuid.UUID
	attempt int
}

// Lease is a stream's: the job (its lease id), the attempt the runner
// holds, and the runner. The caller has checked that it holds it.
type Lease struct {
	ID       uuid.UUID
	Attempt  int
	RunnerID uuid.UUID
	// Standing, when set, says whether the runner may still hold streams
	// (its certificate revoked, the runner revoked or retired: false).
	// Asked every Bounds.Recheck; an error is not an answer.
	Standing func(context.Context) (bool, error)
}

type stream struct {
	lease Lease
	conn  Conn
	mu    sync.Mutex
	s     *session // nil while it stands
}

// session is one person's, over one stream.
type session struct {
	admin    Conn
	agent    Conn
	once     sync.Once
	done     chan struct{}
	end      runnerapi.SessionEnd
	in, out  atomic.Int64
	finished time.Time
}

// finish ends the session once: toAdmin is what the person is told, and
// the agent is told the same (it stops the exec'd process, or lets the
// job run on after a detach).
func (s *session) finish(end runnerapi.SessionEnd) {
	s.once.Do(func() {
		s.end, s.finished = end, time.Now()
		s.admin.Close(end)
		s.agent.Close(end)
		close(s.done)
	})
}

// Stand holds an agent's stream for lease until a session has used it, or
// the agent goes: it reads what the agent sends and passes it to the
// session. It returns when the stream is over.
func (h *Hub) Stand(ctx context.Context, l Lease, conn Conn) error {
	st := &stream{lease: l, conn: conn}
	key := streamKey{l.ID, l.Attempt}
	h.mu.Lock()
	if len(h.standing[key]) >= h.Bounds.StandingPerLease {
		h.mu.Unlock()
		conn.Close(runnerapi.SessionEnd{Code: runnerapi.EndTooMany, Reason: "this lease already has its standing streams"})
		return nil
	}
	h.standing[key] = append(h.standing[key], st)
	if ch := h.arrived[key]; ch != nil {
		close(ch)
		delete(h.arrived, key)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.unstand(key, st)
		h.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() {
		h.endStream(st, runnerapi.SessionEnd{Code: runnerapi.EndServerGone, Reason: "the server is shutting down"})
	})
	defer stop()
	if l.Standing != nil && h.Bounds.Recheck > 0 {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go h.recheck(rctx, st)
	}
	for {
		msg, err := conn.Read()
		st.mu.Lock()
		s := st.s
		st.mu.Unlock()
		switch {
		case s == nil && err != nil:
			conn.Close(runnerapi.SessionEnd{Code: runnerapi.EndAgentGone, Reason: "closed"})
			return nil
		case s == nil:
			// A standing stream carries nothing until a session opens.
			conn.Close(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: "a frame before the session opened"})
			return nil
		case !s.fromAgent(msg, err, agentGone):
			return nil
		}
	}
}

var lenderGone = runnerapi.SessionEnd{Code: runnerapi.EndServerGone, Reason: "the server replica holding the runner's stream went away"}

var agentGone = runnerapi.SessionEnd{Code: runnerapi.EndAgentGone, Reason: "the runner's agent went away; the job runs on"}

// fromAgent passes one message (or read error) from the agent's side to
// the person's: false when it ended the session. gone is the end a read
// error means.
func (s *session) fromAgent(msg []byte, err error, gone runnerapi.SessionEnd) bool {
	if err != nil {
		s.finish(gone)
		return false
	}
	f, err := runnerapi.ParseFrame(msg)
	switch {
	case errors.Is(err, runnerapi.ErrFrameTooLarge):
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndFrameTooLarge, Reason: "the agent sent a frame over the bound"})
		return false
	case err != nil:
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: err.Error()})
		return false
	}
	switch f.Type {
	case runnerapi.FrameStdout, runnerapi.FrameStderr:
		s.out.Add(int64(len(f.Payload)))
		if s.admin.Write(msg) != nil {
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndDetached, Reason: "the person's connection went away"})
			return false
		}
		return true
	case runnerapi.FrameEnd:
		var end runnerapi.SessionEnd
		if f.Decode(&end) != nil || end.Code == "" {
			end = runnerapi.SessionEnd{Code: runnerapi.EndFailed, Reason: "the agent ended the session without saying why"}
		}
		s.finish(end)
		return false
	default:
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: "the agent sent a frame only a person sends"})
		return false
	}
}

// unstand takes st off the standing list; h.mu held.
func (h *Hub) unstand(key streamKey, st *stream) {
	list := h.standing[key]
	for i, x := range list {
		if x == st {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(h.standing, key)
	} else {
		h.standing[key] = list
	}
}

func (h *Hub) endStream(st *stream, end runnerapi.SessionEnd) {
	st.mu.Lock()
	s := st.s
	st.mu.Unlock()
	if s != nil {
		s.finish(end)
	} else {
		st.conn.Close(end)
	}
}

// recheck ends st, and its session, once its runner may no longer hold
// streams.
func (h *Hub) recheck(ctx context.Context, st *stream) {
	tick := time.NewTicker(h.Bounds.Recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ok, err := st.lease.Standing(ctx); err == nil && !ok {
			h.endStream(st, runnerapi.SessionEnd{Code: runnerapi.EndRevoked, Reason: "the runner may no longer hold streams (revoked or retired)"})
			return
		}
	}
}

// Target is the job a session is for, as the store has it now: the lease
// (job id), the attempt and the runner holding it, and who asks.
type Target struct {
	Lease   Lease
	TokenID uuid.UUID
}

// Summary is what a session's audit entry says: never its bytes.
type Summary struct {
	Started  time.Time
	Ended    time.Time
	BytesIn  int64 // from the person to the job
	BytesOut int64 // from the job to the person
	End      runnerapi.SessionEnd
}

// Open runs one session on t's job: it takes the lease's standing stream
// (waiting up to StreamWait for one), tells the agent what to open, and
// passes the person's frames until the session ends. ctx ending (the
// person's token revoked, the server stopping) ends it with cause's end
// (SessionEnd, or EndServerGone).
func (h *Hub) Open(ctx context.Context, t Target, open runnerapi.SessionOpen, admin Conn) Summary {
	sum := Summary{Started: time.Now()}
	refuse := func(end runnerapi.SessionEnd) Summary {
		admin.Close(end)
		sum.Ended, sum.End = time.Now(), end
		return sum
	}
	if !h.count(t, 1) {
		return refuse(runnerapi.SessionEnd{Code: runnerapi.EndTooMany, Reason: "too many sessions on this job, runner or token"})
	}
	defer h.count(t, -1)
	st, remote := h.find(ctx, t.Lease)
	if st == nil && remote == nil {
		return refuse(runnerapi.SessionEnd{Code: runnerapi.EndUnavailable, Reason: "the job's agent is not reachable: it is not running, or its agent is away"})
	}
	agent := remote
	if st != nil {
		agent = st.conn
	}
	s := &session{admin: admin, agent: agent, done: make(chan struct{})}
	if st != nil {
		st.mu.Lock()
		st.s = s
		st.mu.Unlock()
	}
	stop := context.AfterFunc(ctx, func() {
		end, ok := context.Cause(ctx).(*EndError)
		if !ok {
			end = &EndError{runnerapi.SessionEnd{Code: runnerapi.EndServerGone, Reason: "the server is shutting down"}}
		}
		s.finish(end.End)
	})
	defer stop()
	if agent.Write(runnerapi.JSONFrame(runnerapi.FrameOpen, open)) != nil && remote == nil {
		// (A replica that refused to lend said why: its reader passes it.)
		s.finish(agentGone)
	}
	if remote != nil {
		go func() {
			for {
				msg, err := remote.Read()
				if !s.fromAgent(msg, err, lenderGone) {
					return
				}
			}
		}()
	}
	go h.fromPerson(s)
	<-s.done
	sum.Ended, sum.End = s.finished, s.end
	sum.BytesIn, sum.BytesOut = s.in.Load(), s.out.Load()
	return sum
}

// Lend gives another replica's session the stream standing here for
// lease at attempt: false, and nothing else happens, when none stands
// here. Once one is taken, upgrade answers the other replica, and the
// session runs between the two until it ends, the other replica speaking
// for the person: its first frame is what the agent is to open. The
// person's token is counted where the person is; the job and the runner
// are counted here too.
func (h *Hub) Lend(ctx context.Context, lease uuid.UUID, attempt int, upgrade func() (Conn, error)) bool {
	key := streamKey{lease, attempt}
	st := h.take(ctx, key, 0)
	if st == nil {
		return false
	}
	t := Target{Lease: st.lease}
	if !h.count(t, 1) {
		h.putBack(key, st)
		if peer, err := upgrade(); err == nil {
			peer.Close(runnerapi.SessionEnd{Code: runnerapi.EndTooMany, Reason: "too many sessions on this job or runner"})
		}
		return true
	}
	defer h.count(t, -1)
	peer, err := upgrade()
	if err != nil {
		h.putBack(key, st)
		return true
	}
	s := &session{admin: peer, agent: st.conn, done: make(chan struct{})}
	st.mu.Lock()
	st.s = s
	st.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndServerGone, Reason: "the server is shutting down"})
	})
	defer stop()
	// The other replica sends what to open at once; one that does not is
	// not waited for past StreamWait.
	quiet := time.AfterFunc(h.Bounds.StreamWait, func() {
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: "a lent stream waited for what to open"})
	})
	msg, err := peer.Read()
	quiet.Stop()
	f, perr := runnerapi.ParseFrame(msg)
	switch {
	case err != nil:
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndDetached, Reason: "the person's connection went away"})
	case perr != nil || f.Type != runnerapi.FrameOpen:
		s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: "a lent stream begins with what to open"})
	case st.conn.Write(msg) != nil:
		s.finish(agentGone)
	default:
		go h.fromPerson(s)
	}
	<-s.done
	return true
}

// putBack stands st again for key: it was taken, but no session used it.
func (h *Hub) putBack(key streamKey, st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.standing[key] = append(h.standing[key], st)
	if ch := h.arrived[key]; ch != nil {
		close(ch)
		delete(h.arrived, key)
	}
}

// Elsewhere reaches the streams standing on other replicas.
type Elsewhere interface {
	// Take returns a connection to the relay of a replica that lent this
	// session its stream for lease at attempt (Lend), or nil when no
	// other replica has one standing. The error says what could not be
	// asked; a replica that has none is not an error. ctx bounds the
	// asking only: the connection returned outlives it.
	Take(ctx context.Context, lease uuid.UUID, attempt int) (Conn, error)
}

// elsewherePoll is how long a session waits for a stream on this replica
// between asking the others.
const elsewherePoll = 250 * time.Millisecond

// find takes the lease's stream, here or on another replica, waiting up
// to StreamWait for one.
func (h *Hub) find(ctx context.Context, l Lease) (*stream, Conn) {
	key := streamKey{l.ID, l.Attempt}
	if h.Elsewhere == nil {
		return h.take(ctx, key, h.Bounds.StreamWait), nil
	}
	deadline := time.Now().Add(h.Bounds.StreamWait)
	for {
		if st := h.take(ctx, key, 0); st != nil {
			return st, nil
		}
		// Asking is bounded by the wait too: a replica that crashed a
		// moment ago is still listed, and its dial times out.
		actx, cancel := context.WithDeadline(ctx, deadline)
		c, _ := h.Elsewhere.Take(actx, l.ID, l.Attempt)
		cancel()
		if c != nil {
			return nil, c
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return nil, nil
		}
		if st := h.take(ctx, key, min(left, elsewherePoll)); st != nil {
			return st, nil
		}
	}
}

// fromPerson passes the person's frames to the agent until the session
// ends.
func (h *Hub) fromPerson(s *session) {
	for {
		msg, err := s.admin.Read()
		if err != nil {
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndDetached, Reason: "the person's connection went away"})
			return
		}
		f, err := runnerapi.ParseFrame(msg)
		switch {
		case errors.Is(err, runnerapi.ErrFrameTooLarge):
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndFrameTooLarge, Reason: "a frame over the bound of 32 KiB"})
			return
		case err != nil:
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: err.Error()})
			return
		}
		switch f.Type {
		case runnerapi.FrameStdin, runnerapi.FrameStdinEnd, runnerapi.FrameResize:
			if f.Type == runnerapi.FrameStdin {
				s.in.Add(int64(len(f.Payload)))
			}
			if s.agent.Write(msg) != nil {
				s.finish(runnerapi.SessionEnd{Code: runnerapi.EndAgentGone, Reason: "the runner's agent went away; the job runs on"})
				return
			}
		case runnerapi.FrameEnd:
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndDetached, Reason: "detached; the job runs on"})
			return
		default:
			s.finish(runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: "a frame only the agent sends"})
			return
		}
	}
}

// take pops a standing stream for key, waiting up to wait for one.
func (h *Hub) take(ctx context.Context, key streamKey, wait time.Duration) *stream {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		if list := h.standing[key]; len(list) > 0 {
			st := list[0]
			h.unstand(key, st)
			h.mu.Unlock()
			return st
		}
		if wait <= 0 {
			h.mu.Unlock()
			return nil
		}
		ch := h.arrived[key]
		if ch == nil {
			ch = make(chan struct{})
			h.arrived[key] = ch
		}
		h.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// count adds d to the session counts of t, refusing (false) a session past
// a bound.
func (h *Hub) count(t Target, d int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.Bounds
	if d > 0 && (h.perJob[t.Lease.ID] >= b.SessionsPerJob || h.perRun[t.Lease.RunnerID] >= b.SessionsPerRunner || h.perToken[t.TokenID] >= b.SessionsPerToken) {
		return false
	}
	for _, c := range []struct {
		m  map[uuid.UUID]int
		id uuid.UUID
	}{{h.perJob, t.Lease.ID}, {h.perRun, t.Lease.RunnerID}, {h.perToken, t.TokenID}} {
		if c.id == uuid.Nil {
			continue // a lent stream's session: its token is counted where the person is
		}
		if c.m[c.id] += d; c.m[c.id] <= 0 {
			delete(c.m, c.id)
		}
	}
	return true
}

// EndError is a context cause that ends a session with End.
type EndError struct{ End runnerapi.SessionEnd }

func (e *EndError) Error() string { return e.End.Code + ": " + e.End.Reason }
