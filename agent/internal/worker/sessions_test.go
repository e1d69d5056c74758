package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/agent/internal/runtime/runtimetest"
	"github.com/runmesh/runmesh/runnerapi"
)

// sessionHost is the fake system with what sessions need: a Hold that
// echoes its input in capitals, and an Exec the test scripts.
type sessionHost struct {
	*runtimetest.System
	mu      sync.Mutex
	sizes   []runnerapi.Size
	command []string
	exec    func(s runtime.SessionIO) int
	copied  map[string][]byte // what CopyIn received, by DST
	files   map[string][]byte // what CopyOut sends, by SRC
}

var _ SessionHost = (*sessionHost)(nil)

func (h *sessionHost) CopyIn(_ context.Context, _, dst, name string, in io.Reader) error {
	b, err := io.ReadAll(in)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.copied == nil {
		h.copied = map[string][]byte{}
	}
	h.copied[dst+"|"+name] = b
	return err
}

func (h *sessionHost) CopyOut(_ context.Context, _, src string, out io.Writer) error {
	h.mu.Lock()
	b, ok := h.files[src]
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: %w", src, runtime.ErrNoSuchPath)
	}
	_, err := out.Write(b)
	return err
}

func (h *sessionHost) Hold(ctx context.Context, container string, t *runtime.Terminal) {
	defer t.Close()
	stop := context.AfterFunc(ctx, t.Close) // the input ends with ctx
	defer stop()
	sio := t.IO()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sz := <-sio.Resize:
				h.mu.Lock()
				h.sizes = append(h.sizes, sz)
				h.mu.Unlock()
			}
		}
	}()
	buf := make([]byte, 1024)
	for ctx.Err() == nil {
		n, err := sio.Stdin.Read(buf)
		if n > 0 {
			sio.Stdout.Write([]byte(strings.ToUpper(string(buf[:n]))))
		}
		if err != nil {
			return
		}
	}
}

func (h *sessionHost) Exec(_ context.Context, _ string, cmd []string, _ bool, _ runnerapi.Size, s runtime.SessionIO) (int, error) {
	h.mu.Lock()
	h.command = cmd
	h.mu.Unlock()
	return h.exec(s), nil
}

// streams plays the server's side: each stream the agent dials arrives on
// conns, with the path it dialled.
type streams struct {
	srv   *httptest.Server
	conns chan *websocket.Conn
	paths chan string
	fail  error // what Session returns instead of dialling
}

func newStreams(t *testing.T) *streams {
	s := &streams{conns: make(chan *websocket.Conn, 8), paths: make(chan string, 8)}
	up := websocket.Upgrader{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.paths <- r.URL.RequestURI()
		s.conns <- c
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *streams) Session(ctx context.Context, lease string, attempt int) (*websocket.Conn, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	u := "ws" + strings.TrimPrefix(s.srv.URL, "http") + runnerapi.PathSession(lease) + "?attempt=" + itoa(attempt)
	c, _, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
	return c, err
}

func itoa(n int) string { return strconv.Itoa(n) }

func (s *streams) next(t *testing.T) (*websocket.Conn, string) {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { c.Close() })
		return c, <-s.paths
	case <-time.After(5 * time.Second):
		t.Fatal("the agent dialled no stream")
	}
	return nil, ""
}

func send(t *testing.T, c *websocket.Conn, msg []byte) {
	t.Helper()
	if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		t.Fatal(err)
	}
}

// until reads frames until one of type want whose payload holds s (or,
// with s empty, any of that type), and returns it.
func until(t *testing.T, c *websocket.Conn, want runnerapi.FrameType, s string) runnerapi.Frame {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var seen string
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for a %q frame with %q (saw %q): %v", want, s, seen, err)
		}
		f, err := runnerapi.ParseFrame(msg)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == want {
			seen += string(f.Payload)
			if strings.Contains(seen, s) {
				return f
			}
		}
	}
}

func sessionWorker(t *testing.T, stdio runnerapi.Stdio, idle int) (*Worker, *sessionHost, *streams, *held) {
	w, host, j := sessionJob(t, stdio, idle)
	s := newStreams(t)
	w.Sessions = s
	return w, host, s, j
}

// sessionJob is a worker whose host runs sessions, and a running job;
// no streams (a synctest bubble has no network).
func sessionJob(t *testing.T, stdio runnerapi.Stdio, idle int) (*Worker, *sessionHost, *held) {
	sys := runtimetest.New(t)
	w := newWorker(t, sys, newAPI())
	host := &sessionHost{System: sys}
	w.Runtime.System = host
	j := newHeld(w.Runtime.Take(runnerapi.Lease{LeaseID: "dddddddd-0000-4000-8000-000000000001", Attempt: 2, Image: "localhost/busybox:latest",
		Stdio: stdio, IdleTimeoutSeconds: idle}, nil), runnerapi.PhaseRunning)
	return w, host, j
}

// A person attached to a TTY job types into its process and sees its
// output; their terminal's size reaches it; a detach ends the session and
// leaves the job, and another stream already stands for the next one.
func TestASessionJoinsTheJobsTerminal(t *testing.T) {
	t.Parallel()
	w, host, s, j := sessionWorker(t, runnerapi.StdioTTY, 0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.stand(ctx, j, w.holdTerminal(ctx, j))

	c, path := s.next(t)
	if path != runnerapi.PathSession(j.lease.LeaseID)+"?attempt=2" {
		t.Fatalf("dialled %s", path)
	}
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "s1", Kind: runnerapi.SessionAttach, TTY: true, Size: runnerapi.Size{Cols: 80, Rows: 24}}))
	send(t, c, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, []byte("hi\r")))
	until(t, c, runnerapi.FrameStdout, "HI\r")
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameResize, runnerapi.Size{Cols: 100, Rows: 30}))
	eventually(t, "both sizes at the terminal", func() bool {
		host.mu.Lock()
		defer host.mu.Unlock()
		return len(host.sizes) == 2 && host.sizes[0] == runnerapi.Size{Cols: 80, Rows: 24} && host.sizes[1] == runnerapi.Size{Cols: 100, Rows: 30}
	})

	next, _ := s.next(t) // standing for the next session already
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameEnd, runnerapi.SessionEnd{Code: runnerapi.EndDetached}))
	var end runnerapi.SessionEnd
	if err := until(t, c, runnerapi.FrameEnd, "").Decode(&end); err != nil || end.Code != runnerapi.EndDetached {
		t.Fatalf("end %+v (%v)", end, err)
	}

	// The next session sees the screen so far. A size with a zero in it
	// (no terminal there) is not passed on, at the open or later.
	send(t, next, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "s2", Kind: runnerapi.SessionAttach, TTY: true,
		Size: runnerapi.Size{Cols: 0, Rows: 24}}))
	until(t, next, runnerapi.FrameStdout, "HI\r")
	send(t, next, runnerapi.JSONFrame(runnerapi.FrameResize, runnerapi.Size{Cols: 120, Rows: 0}))
	send(t, next, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, []byte("x")))
	until(t, next, runnerapi.FrameStdout, "X")
	time.Sleep(100 * time.Millisecond) // a size passed on would reach the terminal by now
	host.mu.Lock()
	defer host.mu.Unlock()
	if len(host.sizes) != 2 {
		t.Fatalf("sizes at the terminal %v: one with a zero was passed on", host.sizes)
	}
}

// exec's streams stay apart, its input ends when the person's does, and
// its exit status ends the session.
func TestAnExecSessionReturnsTheStatus(t *testing.T) {
	t.Parallel()
	w, host, s, j := sessionWorker(t, runnerapi.StdioLogs, 0)
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB: four frames
	host.exec = func(sio runtime.SessionIO) int {
		in, _ := io.ReadAll(sio.Stdin)
		sio.Stdout.Write([]byte("out:" + string(in)))
		sio.Stderr.Write([]byte("err"))
		// io.Copy checks what each Write says it wrote.
		if _, err := io.Copy(sio.Stdout, bytes.NewReader(big)); err != nil {
			return 9
		}
		return 3
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.stand(ctx, j, w.holdTerminal(ctx, j))
	c, _ := s.next(t)
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "s1", Kind: runnerapi.SessionExec, Command: []string{"cat"}}))
	send(t, c, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, []byte("abc")))
	send(t, c, runnerapi.AppendFrame(nil, runnerapi.FrameStdinEnd, nil))
	// All of the output, in frames of at most MaxFramePayload, then the
	// end.
	var out []byte
	var end runnerapi.SessionEnd
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for done := false; !done; {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		f, err := runnerapi.ParseFrame(msg)
		if err != nil {
			t.Fatal(err)
		}
		switch f.Type {
		case runnerapi.FrameStdout:
			out = append(out, f.Payload...)
		case runnerapi.FrameEnd:
			if err := f.Decode(&end); err != nil {
				t.Fatal(err)
			}
			done = true
		}
	}
	if want := append([]byte("out:abc"), big...); !bytes.Equal(out, want) {
		t.Fatalf("%d bytes of output, want %d", len(out), len(want))
	}
	if end.Code != runnerapi.EndExited || end.Exit == nil || *end.Exit != 3 {
		t.Fatalf("end %+v", end)
	}
	if host.command[0] != "cat" {
		t.Fatalf("ran %v", host.command)
	}
	// A LOGS job has no terminal to attach to.
	c2, _ := s.next(t)
	send(t, c2, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "s2", Kind: runnerapi.SessionAttach}))
	if err := until(t, c2, runnerapi.FrameEnd, "").Decode(&end); err != nil || end.Code != runnerapi.EndFailed {
		t.Fatalf("attach to a LOGS job: %+v (%v)", end, err)
	}
}

// cp: a tar stream in, whole and in order; one out in
// frames; a missing path fails the session with why; a malformed command
// opens nothing.
func TestCopySessions(t *testing.T) {
	t.Parallel()
	w, host, s, j := sessionWorker(t, runnerapi.StdioLogs, 0)
	host.files = map[string][]byte{"/out/ckpt": bytes.Repeat([]byte("ckpt"), 50<<10)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.stand(ctx, j, w.holdTerminal(ctx, j))

	var in []byte
	c, _ := s.next(t)
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "in", Kind: runnerapi.SessionCopy, Command: []string{"in", "/data", "x.tar"}}))
	for i := range 24 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, runnerapi.MaxFramePayload)
		in = append(in, chunk...)
		send(t, c, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, chunk))
	}
	send(t, c, runnerapi.AppendFrame(nil, runnerapi.FrameStdinEnd, nil))
	var end runnerapi.SessionEnd
	if err := until(t, c, runnerapi.FrameEnd, "").Decode(&end); err != nil || end.Code != runnerapi.EndExited || *end.Exit != 0 {
		t.Fatalf("cp in: %+v (%v)", end, err)
	}
	host.mu.Lock()
	got := host.copied["/data|x.tar"]
	host.mu.Unlock()
	if !bytes.Equal(got, in) {
		t.Fatalf("cp in: %d bytes arrived, want the %d sent", len(got), len(in))
	}

	c, _ = s.next(t)
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "out", Kind: runnerapi.SessionCopy, Command: []string{"out", "/out/ckpt"}}))
	var out []byte
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for done := false; !done; {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		f, _ := runnerapi.ParseFrame(msg)
		switch f.Type {
		case runnerapi.FrameStdout:
			out = append(out, f.Payload...)
		case runnerapi.FrameEnd:
			done = true
			if f.Decode(&end) != nil || end.Code != runnerapi.EndExited {
				t.Fatalf("cp out: %+v", end)
			}
		}
	}
	if !bytes.Equal(out, host.files["/out/ckpt"]) {
		t.Fatalf("cp out: %d bytes, want %d", len(out), len(host.files["/out/ckpt"]))
	}

	c, _ = s.next(t)
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "missing", Kind: runnerapi.SessionCopy, Command: []string{"out", "/no/such"}}))
	if err := until(t, c, runnerapi.FrameEnd, "").Decode(&end); err != nil || end.Code != runnerapi.EndFailed || !strings.Contains(end.Reason, "no such file") {
		t.Fatalf("cp of a missing path: %+v (%v)", end, err)
	}
	c, _ = s.next(t)
	send(t, c, runnerapi.JSONFrame(runnerapi.FrameOpen, runnerapi.SessionOpen{ID: "bad", Kind: runnerapi.SessionCopy, Command: []string{"in", "/data", "../escape"}}))
	if err := until(t, c, runnerapi.FrameEnd, "").Decode(&end); err != nil || end.Code != runnerapi.EndFailed {
		t.Fatalf("cp with a name that is a path: %+v (%v)", end, err)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if len(host.copied) != 1 {
		t.Fatalf("copies made: %v", len(host.copied))
	}
}

// failing is a dialler that refuses, counting the dials.
type failing struct {
	err   error
	dials int
}

func (f *failing) Session(context.Context, string, int) (*websocket.Conn, error) {
	f.dials++
	return nil, f.err
}

// An attempt the server says is no longer ours gets no stream again;
// anything else is tried again, less and less often.
func TestNoStreamForAStaleAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, _, j := sessionJob(t, runnerapi.StdioTTY, 0)
		stale := &failing{err: &runnerclient.APIError{Status: 409, Code: runnerapi.CodeStaleAttempt}}
		w.Sessions = stale
		w.stand(t.Context(), j, nil) // returns
		if stale.dials != 1 {
			t.Fatalf("%d dials for a stale attempt", stale.dials)
		}
		down := &failing{err: errors.New("connection refused")}
		w.Sessions = down
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		w.stand(ctx, j, nil)
		// At 0, 1, 3, 7, 15 and 31 s (1 s, doubling, at most 30 s apart): 6 dials in a minute.
		if down.dials != 6 {
			t.Fatalf("%d dials in a minute to a server that did not answer", down.dials)
		}
	})
}

// No byte either way for the idle timeout: the job is stopped as idle;
// a byte resets the clock.
func TestAnIdleJobIsStopped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w, _, j := sessionJob(t, runnerapi.StdioPipe, 60)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		term := w.holdTerminal(ctx, j)
		time.Sleep(50 * time.Second)
		term.IO().Stdout.Write([]byte("x")) // a byte out
		time.Sleep(50 * time.Second)
		synctest.Wait()
		if j.job.StoppedIdle() {
			t.Fatal("stopped 50 s after its last byte, with a 60 s bound")
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if !j.job.StoppedIdle() {
			t.Fatal("not stopped 65 s after its last byte")
		}
		cancel()
		synctest.Wait()
	})
}
