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
)

// Sessions dials a lease's session stream (runnerclient.Client.Session).
type Sessions interface {
	Session(ctx context.Context, leaseID string, attempt int) (*websocket.Conn, error)
}

// SessionHost runs a session's process on this host (runtime.Local).
type SessionHost interface {
	Attach(ctx context.Context, container string, tty bool, s runtime.SessionIO) error
	Exec(ctx context.Context, container string, cmd []string, tty bool, size runnerapi.Size, s runtime.SessionIO) (int, error)
}

// stand keeps one stream standing for the running job's next session,
// until ctx ends (the job ended, or the agent stops): each stream a
// session takes is served, and the next one dialled at once. A stale
// attempt's stream, which the server refuses, is not asked for again.
func (w *Worker) stand(ctx context.Context, j *held) {
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
			end := serveSession(ctx, conn, host, container, j.lease.Stdio, open)
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
	return f.conn.WriteMessage(websocket.BinaryMessage, runnerapi.AppendFrame(nil, t, p))
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
func serveSession(ctx context.Context, conn *websocket.Conn, host SessionHost, container string, stdio runnerapi.Stdio, open runnerapi.SessionOpen) runnerapi.SessionEnd {
	out := &frames{conn: conn}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdin, toStdin := io.Pipe()
	resize := make(chan runnerapi.Size, 1)
	if open.Size.Cols > 0 {
		resize <- open.Size
	}
	// The person's frames.
	go func() {
		defer toStdin.Close()
		for {
			_, msg, err := conn.ReadMessage()
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
				if _, err := toStdin.Write(f.Payload); err != nil {
					// The process stopped reading (it ended): what the
					// person types next goes nowhere.
					continue
				}
			case runnerapi.FrameStdinEnd:
				toStdin.Close()
			case runnerapi.FrameResize:
				var sz runnerapi.Size
				if f.Decode(&sz) == nil {
					select { // only the latest size matters
					case <-resize:
					default:
					}
					resize <- sz
				}
			case runnerapi.FrameEnd:
				cancel(errDetached)
				return
			}
		}
	}()
	sio := runtime.SessionIO{Stdin: stdin, Stdout: writer{out, runnerapi.FrameStdout}, Stderr: writer{out, runnerapi.FrameStderr}, Resize: resize}
	var end runnerapi.SessionEnd
	switch open.Kind {
	case runnerapi.SessionAttach:
		tty := stdio == runnerapi.StdioTTY
		if tty {
			sio.Stderr = nil
		}
		err := host.Attach(sctx, container, tty, sio)
		end = endOf(sctx, err, runnerapi.SessionEnd{Code: runnerapi.EndJobEnded, Reason: "the job's process ended"})
	case runnerapi.SessionExec:
		if open.TTY {
			sio.Stderr = nil
		}
		code, err := host.Exec(sctx, container, open.Command, open.TTY, open.Size, sio)
		end = endOf(sctx, err, runnerapi.SessionEnd{Exit: &code, Code: runnerapi.EndExited, Reason: "the process ended"})
	default:
		end = runnerapi.SessionEnd{Code: runnerapi.EndFailed, Reason: "this agent opens no session of kind " + open.Kind}
	}
	stdin.Close()
	out.mu.Lock()
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_ = conn.WriteMessage(websocket.BinaryMessage, runnerapi.JSONFrame(runnerapi.FrameEnd, end))
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(end.CloseCode(), ""), time.Now().Add(time.Second))
	out.mu.Unlock()
	conn.Close()
	return end
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
