package runtime

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// ReplayBytes is how much of an interactive job's latest output the agent
// keeps, so that a person attaching sees the recent screen. Older output
// nobody read is dropped.
const ReplayBytes = 64 << 10

// Terminal holds an interactive job's streams for as long as it runs on
// this host: one attach to its process (Hold), and the people's sessions
// that come and go (Join). It keeps the last ReplayBytes of output, and
// the time of the last byte either way, for the idle timeout.
type Terminal struct {
	tty bool

	mu      sync.Mutex
	last    time.Time
	closed  bool
	done    chan struct{} // closed with closed
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	resize  chan runnerapi.Size
	viewers map[*viewer]struct{}

	// out orders output: a joining viewer gets the replay, then what comes
	// after it, never the other way round.
	out  sync.Mutex
	ring []byte
}

type viewer struct{ stdout, stderr io.Writer }

// NewTerminal is the terminal of a job whose mode is stdio.
func NewTerminal(stdio runnerapi.Stdio) *Terminal {
	r, w := io.Pipe()
	return &Terminal{tty: stdio == runnerapi.StdioTTY, last: time.Now(), done: make(chan struct{}), stdinR: r, stdinW: w,
		resize: make(chan runnerapi.Size, 1), viewers: map[*viewer]struct{}{}}
}

// Hold attaches to the job's process until it ends (or ctx ends), again
// after a broken attach; then it closes the terminal.
func (l *Local) Hold(ctx context.Context, container string, t *Terminal) {
	defer t.Close()
	for ctx.Err() == nil {
		err := l.Attach(ctx, container, t.tty, t.IO())
		if err == nil {
			return // the process's output ended: it did
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// IO is the process's side of the terminal: what a Hold attaches to it.
func (t *Terminal) IO() SessionIO {
	return SessionIO{Stdin: t.stdinR, Stdout: output{t, false}, Stderr: output{t, true}, Resize: t.resize}
}

// output is one of the process's streams into the terminal.
type output struct {
	t      *Terminal
	stderr bool
}

func (o output) Write(p []byte) (int, error) {
	t := o.t
	t.out.Lock()
	defer t.out.Unlock()
	t.ring = append(t.ring, p...)
	if n := len(t.ring) - ReplayBytes; n > 0 {
		t.ring = append(t.ring[:0], t.ring[n:]...)
	}
	t.mu.Lock()
	t.last = time.Now()
	vs := make([]*viewer, 0, len(t.viewers))
	for v := range t.viewers {
		vs = append(vs, v)
	}
	t.mu.Unlock()
	// Each viewer in turn: one that stops reading stops the output (and
	// so the process, once conmon's buffer is full); nothing grows here.
	for _, v := range vs {
		w := v.stdout
		if o.stderr && v.stderr != nil {
			w = v.stderr
		}
		if _, err := w.Write(p); err != nil {
			t.leave(v)
		}
	}
	return len(p), nil
}

// Session is one person's view of the terminal.
type Session struct {
	t *Terminal
	v *viewer
}

// Join adds a viewer: it is sent the replay at once, then the output as it
// comes. stderr is nil for a TTY, whose output is one stream.
func (t *Terminal) Join(stdout, stderr io.Writer) (*Session, error) {
	t.out.Lock()
	defer t.out.Unlock()
	if len(t.ring) > 0 {
		if _, err := stdout.Write(t.ring); err != nil {
			return nil, err
		}
	}
	v := &viewer{stdout: stdout, stderr: stderr}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, io.EOF
	}
	t.viewers[v] = struct{}{}
	return &Session{t: t, v: v}, nil
}

func (t *Terminal) leave(v *viewer) {
	t.mu.Lock()
	delete(t.viewers, v)
	t.mu.Unlock()
}

// Leave ends the view; the job runs on.
func (s *Session) Leave() { s.t.leave(s.v) }

// Input passes bytes to the process's stdin (blocking while it does not
// read them).
func (s *Session) Input(p []byte) error {
	t := s.t
	t.mu.Lock()
	t.last = time.Now()
	t.mu.Unlock()
	_, err := t.stdinW.Write(p)
	return err
}

// EndInput ends the process's stdin (PIPE: it reads end of file), for
// every session.
func (s *Session) EndInput() { s.t.stdinW.Close() }

// Resize sets the terminal's size (the latest one wins).
func (s *Session) Resize(sz runnerapi.Size) {
	t := s.t
	select {
	case <-t.resize:
	default:
	}
	t.resize <- sz
}

// IdleSince is the time of the last byte either way.
func (t *Terminal) IdleSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Done is closed once the process's streams ended.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Close ends the terminal: the process's streams ended.
func (t *Terminal) Close() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.done)
	}
	t.mu.Unlock()
	t.stdinW.CloseWithError(io.EOF)
}
