package worker

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
	"github.com/runmesh/runmesh/runnerapi/sessionws"
)

// Sessions dials a lease's session stream (runnerclient.Client.Session).
type Sessions interface {
	Session(ctx context.Context, leaseID string, attempt int) (*websocket.Conn, error)
}

// SessionHost runs a session's process on this host (runtime.Local): it
// holds an interactive job's terminal, and execs beside any job.
type SessionHost interface {
	Hold(ctx context.Context, container string, t *runtime.Terminal)
	Exec(ctx context.Context, container string, cmd []string, tty bool, size runnerapi.Size, s runtime.SessionIO) (int, error)
	CopyIn(ctx context.Context, container, dst, name string, in io.Reader) error
	CopyOut(ctx context.Context, container, src string, out io.Writer) error
}

var _ SessionHost = (*runtime.Local)(nil) // the agent's runtime holds sessions

// holdTerminal attaches to an interactive job's process for as long as it
// runs, and stops the job once no byte went either way for its idle
// timeout.
func (w *Worker) holdTerminal(ctx context.Context, j *held) *runtime.Terminal {
	host, ok := w.Runtime.System.(SessionHost)
	if !ok || !j.lease.Stdio.Interactive() {
		return nil
	}
	t := runtime.NewTerminal(j.lease.Stdio)
	go host.Hold(ctx, w.Runtime.System.Host().Paths(j.lease.LeaseID, j.lease.Attempt).Container, t)
	if idle := time.Duration(j.lease.IdleTimeoutSeconds) * time.Second; idle > 0 {
		go func() {
			tick := time.NewTicker(min(idle/10, 5*time.Second))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.Done():
					return
				case <-tick.C:
				}
				if time.Since(t.IdleSince()) >= idle {
					w.Log.Info("stopping an idle interactive job", "lease_id", j.lease.LeaseID, "idle_timeout_seconds", j.lease.IdleTimeoutSeconds)
					j.job.StopIdle()
					return
				}
			}
		}()
	}
	return t
}

// stand keeps one stream standing for the running job's next session,
// until ctx ends (the job ended, or the agent stops): each stream a
// session takes is served, and the next one dialled at once. A stale
// attempt's stream, which the server refuses, is not asked for again.
func (w *Worker) stand(ctx context.Context, j *held, term *runtime.Terminal) {
	host, ok := w.Runtime.System.(SessionHost)
	if !ok || w.Sessions == nil {
		return
	}
	l := j.lease
	container := w.Runtime.System.Host().Paths(l.LeaseID, l.Attempt).Container
	log := w.Log.With("lease_id", l.LeaseID, "attempt", l.Attempt)
	backoff := time.Second
	for ctx.Err() == nil {
		conn, err := w.Sessions.Session(ctx, l.LeaseID, l.Attempt)
		if err != nil {
			if runnerclient.IsRefusal(err) && final(err) {
				log.Info("no session stream: the attempt is no longer ours", "err", err)
				return
			}
			if ctx.Err() == nil {
				log.Warn("dialling the session stream failed: no session can reach the job until it succeeds", "err", err, "retry_in", backoff)
			}
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		open, err := awaitOpen(conn)
		if err != nil {
			stop()
			conn.Close()
			// The server closed a stream nobody took (it restarted, or has
			// enough of ours): dial again, not at once.
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		log.Info("session opened", "session", open.ID, "kind", open.Kind, "tty", open.TTY)
		go func() {
			defer stop()
			end := serveSession(ctx, conn, host, term, container, open)
			log.Info("session ended", "session", open.ID, "end", end.Code, "reason", end.Reason)
		}()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// awaitOpen waits on a standing stream for its session's first frame.
func awaitOpen(conn *websocket.Conn) (runnerapi.SessionOpen, error) {
	var open runnerapi.SessionOpen
	_, msg, err := conn.ReadMessage()
	if err != nil {
		return open, err
	}
	f, err := runnerapi.ParseFrame(msg)
	if err != nil {
		return open, err
	}
	if f.Type != runnerapi.FrameOpen {
		return open, errors.New("a session stream's first frame was not an open")
	}
	return open, f.Decode(&open)
}

// frames writes frames to a session's stream, one writer at a time.
type frames struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (f *frames) send(t runnerapi.FrameType, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sessionws.WriteFrame(f.conn, t, p)
}

// writer is one output stream as frames of at most MaxFramePayload.
type writer struct {
	f *frames
	t runnerapi.FrameType
}

func (w writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), runnerapi.MaxFramePayload)
		if err := w.f.send(w.t, p[:k]); err != nil {
			return n, err
		}
		n, p = n+k, p[k:]
	}
	return n, nil
}

// serveSession runs one session: the person's frames in, the process's
// output out, until either ends. It sends the end as the last frame and
// returns it.
func serveSession(ctx context.Context, conn *websocket.Conn, host SessionHost, term *runtime.Terminal, container string, open runnerapi.SessionOpen) runnerapi.SessionEnd {
	out := &frames{conn: conn}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdout, stderr := writer{out, runnerapi.FrameStdout}, writer{out, runnerapi.FrameStderr}
	var end runnerapi.SessionEnd
	switch {
	case open.Kind == runnerapi.SessionAttach && term != nil:
		var errs io.Writer = stderr
		if open.TTY {
			errs = nil
		}
		s, err := term.Join(stdout, errs)
		if err != nil {
			end = runnerapi.SessionEnd{Code: runnerapi.EndJobEnded, Reason: "the job's process ended"}
			break
		}
		if open.Size.Cols > 0 && open.Size.Rows > 0 {
			s.Resize(open.Size) // the person's terminal, as it is now
		}
		go readFrames(conn, cancel, s.Input, s.EndInput, s.Resize)
		select {
		case <-sctx.Done():
		case <-term.Done():
		}
		s.Leave()
		end = endOf(sctx, nil, runnerapi.SessionEnd{Code: runnerapi.EndJobEnded, Reason: "the job's process ended"})
	case open.Kind == runnerapi.SessionExec:
		stdin, toStdin := io.Pipe()
		resize := make(chan runnerapi.Size, 1)
		go readFrames(conn, cancel, func(p []byte) error { _, err := toStdin.Write(p); return err }, func() { toStdin.Close() },
			func(sz runnerapi.Size) {
				select { // only the latest size matters
				case <-resize:
				default:
				}
				resize <- sz
			})
		sio := runtime.SessionIO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Resize: resize}
		if open.TTY {
			sio.Stderr = nil
		}
		code, err := host.Exec(sctx, container, open.Command, open.TTY, open.Size, sio)
		stdin.Close()
		end = endOf(sctx, err, runnerapi.SessionEnd{Exit: &code, Code: runnerapi.EndExited, Reason: "the process ended"})
	case open.Kind == runnerapi.SessionCopy && runnerapi.CheckCopy(open.Command) == nil:
		end = serveCopy(sctx, cancel, conn, host, container, open.Command, stdout)
	default:
		end = runnerapi.SessionEnd{Code: runnerapi.EndFailed, Reason: "this agent opens no session of kind " + open.Kind + " on this job"}
	}
	out.mu.Lock()
	sessionws.Close(conn, end)
	out.mu.Unlock()
	return end
}

// serveCopy runs a cp session: the person's tar stream into the container
// (CopyIn), or the container's out to the person (CopyOut), through
// podman's archive API. Its end is exited 0, or failed with why.
func serveCopy(ctx context.Context, cancel context.CancelCauseFunc, conn *websocket.Conn, host SessionHost, container string, cmd []string, stdout io.Writer) runnerapi.SessionEnd {
	var err error
	if cmd[0] == runnerapi.CopyIn {
		tarIn, toTar := io.Pipe()
		go readFrames(conn, cancel, func(p []byte) error { _, err := toTar.Write(p); return err }, func() { toTar.Close() }, func(runnerapi.Size) {})
		err = host.CopyIn(ctx, container, cmd[1], cmd[2], tarIn)
		tarIn.CloseWithError(io.ErrClosedPipe) // what the person still sends goes nowhere
	} else {
		// Nothing comes in but a detach, or the stream's end.
		go readFrames(conn, cancel, func([]byte) error { return nil }, func() {}, func(runnerapi.Size) {})
		err = host.CopyOut(ctx, container, cmd[1], stdout)
	}
	zero := 0
	return endOf(ctx, err, runnerapi.SessionEnd{Exit: &zero, Code: runnerapi.EndExited, Reason: "copied"})
}

// readFrames passes the person's frames to the process until the stream
// ends (cancel: errGone) or the person detaches (errDetached). input must
// be done with its bytes when it returns (they are read over).
func readFrames(conn *websocket.Conn, cancel context.CancelCauseFunc, input func([]byte) error, endInput func(), resize func(runnerapi.Size)) {
	r := sessionws.NewReader(conn)
	for {
		msg, err := r.Read()
		if err != nil {
			cancel(errGone)
			return
		}
		f, err := runnerapi.ParseFrame(msg)
		if err != nil {
			cancel(err)
			return
		}
		switch f.Type {
		case runnerapi.FrameStdin:
			// An error: the process stopped reading (it ended); what the
			// person types next goes nowhere.
			_ = input(f.Payload)
		case runnerapi.FrameStdinEnd:
			endInput()
		case runnerapi.FrameResize:
			var sz runnerapi.Size
			if f.Decode(&sz) == nil && sz.Cols > 0 && sz.Rows > 0 {
				resize(sz)
			}
		case runnerapi.FrameEnd:
			cancel(errDetached)
			return
		}
	}
}

var (
	errGone     = errors.New("the session's stream closed")
	errDetached = errors.New("detached")
)

// endOf is the session's end: done when the process ended, or why not.
func endOf(ctx context.Context, err error, done runnerapi.SessionEnd) runnerapi.SessionEnd {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errDetached):
		return runnerapi.SessionEnd{Code: runnerapi.EndDetached, Reason: "detached; the job runs on"}
	case errors.Is(cause, errGone):
		return runnerapi.SessionEnd{Code: runnerapi.EndServerGone, Reason: "the session's stream closed"}
	case cause != nil && !errors.Is(cause, context.Canceled):
		return runnerapi.SessionEnd{Code: runnerapi.EndBadFrame, Reason: cause.Error()}
	case ctx.Err() != nil:
		return runnerapi.SessionEnd{Code: runnerapi.EndAgentGone, Reason: "the agent is stopping; the job runs on"}
	case err != nil:
		return runnerapi.SessionEnd{Code: runnerapi.EndFailed, Reason: err.Error()}
	}
	return done
}
