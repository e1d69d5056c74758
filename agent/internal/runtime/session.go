package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	podcopy "github.com/containers/podman/v5/pkg/copy"

	"github.com/runmesh/runmesh/runnerapi"
)

// SessionIO is a session's side of an attach or exec: what the person
// types, where the process's output goes, and the terminal's sizes.
type SessionIO struct {
	Stdin  io.Reader // its end (io.EOF) ends the process's input (PIPE)
	Stdout io.Writer
	Stderr io.Writer // nil with a terminal, which has one stream
	Resize <-chan runnerapi.Size
}

// Attach joins the job's own process (in container) until the process
// ends, the session's input ends, or ctx ends; the job runs on. tty: the
// job was started with a terminal (stdio TTY).
//
// The streams are podman's attach endpoint, reached over the service's
// socket here rather than through the bindings' containers.Attach: that
// cannot be ended but by detach keys in the input (which a PIPE job's
// bytes may hold), and it leaves its input goroutine behind
// (containers/podman#25344). Resizing is the bindings'.
func (l *Local) Attach(ctx context.Context, container string, tty bool, s SessionIO) error {
	q := url.Values{"stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}, "stream": {"true"}}
	conn, br, err := l.api.upgrade(ctx, "/containers/"+url.PathEscape(container)+"/attach?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	return l.pump(ctx, conn, br, tty, s, func(sz runnerapi.Size) error {
		actx, err := l.api.with(ctx)
		if err != nil {
			return err
		}
		h, w := int(sz.Rows), int(sz.Cols)
		return containers.ResizeContainerTTY(actx, container, &containers.ResizeTTYOptions{Height: &h, Width: &w})
	})
}

// Exec runs cmd in the job's container, its streams the session's, and
// returns its exit status. ctx ending ends the session's streams; the
// process may outlive them (podman has no way to signal an exec session).
func (l *Local) Exec(ctx context.Context, container string, cmd []string, tty bool, size runnerapi.Size, s SessionIO) (int, error) {
	actx, err := l.api.with(ctx)
	if err != nil {
		return -1, err
	}
	cfg := new(handlers.ExecCreateConfig)
	cfg.Cmd, cfg.Tty = cmd, tty
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	if tty && size.Cols > 0 && size.Rows > 0 {
		cfg.ConsoleSize = &[2]uint{uint(size.Rows), uint(size.Cols)}
	}
	id, err := containers.ExecCreate(actx, container, cfg)
	if err != nil {
		return -1, fmt.Errorf("creating the exec session: %w", err)
	}
	defer func() {
		rctx, err := l.api.with(context.WithoutCancel(ctx))
		if err == nil {
			_ = containers.ExecRemove(rctx, id, new(containers.ExecRemoveOptions).WithForce(true))
		}
	}()
	body, _ := json.Marshal(handlers.ExecStartConfig{Tty: tty, Height: size.Rows, Width: size.Cols})
	conn, br, err := l.api.upgrade(ctx, "/exec/"+url.PathEscape(id)+"/start", body)
	if err != nil {
		return -1, err
	}
	err = l.pump(ctx, conn, br, tty, s, func(sz runnerapi.Size) error {
		h, w := int(sz.Rows), int(sz.Cols)
		return containers.ResizeExecTTY(actx, id, &containers.ResizeExecTTYOptions{Height: &h, Width: &w})
	})
	if err != nil {
		return -1, err
	}
	in, err := containers.ExecInspect(actx, id, nil)
	if err != nil {
		return -1, fmt.Errorf("reading the exec session's status: %w", err)
	}
	if in.Running {
		return -1, errors.New("the exec'd process still runs, its streams closed")
	}
	return in.ExitCode, nil
}

// pump passes the session's input to conn and conn's output to the
// session until the output ends (the process ended, or closed it) or ctx
// ends; then it closes conn.
func (l *Local) pump(ctx context.Context, conn net.Conn, br *bufio.Reader, tty bool, s SessionIO, resize func(runnerapi.Size) error) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		if s.Stdin == nil {
			return
		}
		if _, err := io.Copy(conn, s.Stdin); err == nil {
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
	}()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case sz, ok := <-s.Resize:
				if !ok {
					return
				}
				if sz.Cols > 0 && sz.Rows > 0 {
					_ = resize(sz)
				}
			}
		}
	}()
	var err error
	if tty {
		_, err = io.Copy(s.Stdout, br)
	} else {
		err = demux(br, s.Stdout, s.Stderr)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// demux splits podman's multiplexed stream (an 8-byte header a frame:
// the stream, then the length) into stdout and stderr.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	buf := make([]byte, 32<<10)
	for {
		fd, n, err := containers.DemuxHeader(r, buf)
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		frame, err := containers.DemuxFrame(r, buf, n)
		if err != nil {
			return err
		}
		w := stdout
		switch fd {
		case 2:
			w = stderr
		case 3:
			return fmt.Errorf("podman: %s", frame)
		}
		if w == nil {
			w = stdout
		}
		if _, err := w.Write(frame); err != nil {
			return err
		}
	}
}

// upgrade sends a POST that podman's service answers by switching the
// connection to the raw streams, and returns that connection (br holds
// what it read past the answer's header).
func (p *podmanAPI) upgrade(ctx context.Context, path string, body []byte) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", p.socket)
	if err != nil {
		return nil, nil, &APIError{URI: p.uri, Err: err}
	}
	req, err := http.NewRequest(http.MethodPost, "http://d/v5.0.0/libpod"+path, bytes.NewReader(body))
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	br := bufio.NewReader(conn)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		conn.Close()
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(msg, &e) == nil && e.Message != "" {
			msg = []byte(e.Message)
		}
		return nil, nil, fmt.Errorf("podman: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return conn, br, nil
}

// ErrNoSuchPath: a copy's path is not in the container.
var ErrNoSuchPath = errors.New("no such file or directory in the container")

// CopyIn writes the tar stream in into the job's container through
// podman's archive API (as podman cp does: no process in the container,
// no tar there). The stream's top entry is name; it lands in dst when dst
// is a directory in the container, else as dst, in dst's directory,
// which must exist.
func (l *Local) CopyIn(ctx context.Context, container, dst, name string, in io.Reader) error {
	actx, err := l.api.with(ctx)
	if err != nil {
		return err
	}
	into, opts := dst, new(containers.CopyOptions)
	st, err := containers.Stat(actx, container, dst)
	switch {
	case err == nil && st != nil && st.IsDir:
	case err == nil || errors.Is(err, podcopy.ErrENOENT):
		// A new name, or a file to replace: in its directory, renamed.
		into = path.Dir(dst)
		if base := path.Base(dst); base != name {
			opts.Rename = map[string]string{name: base}
		}
		if pst, err := containers.Stat(actx, container, into); err != nil || pst == nil || !pst.IsDir {
			return fmt.Errorf("%s: %w", into, ErrNoSuchPath)
		}
	default:
		return fmt.Errorf("%s: %w", dst, err)
	}
	put, err := containers.CopyFromArchiveWithOptions(actx, container, into, in, opts)
	if err != nil {
		return err
	}
	return put()
}

// CopyOut writes src in the job's container to out as a tar stream whose
// top entry is src's base name, through podman's archive API.
func (l *Local) CopyOut(ctx context.Context, container, src string, out io.Writer) error {
	actx, err := l.api.with(ctx)
	if err != nil {
		return err
	}
	if _, err := containers.Stat(actx, container, src); errors.Is(err, podcopy.ErrENOENT) {
		return fmt.Errorf("%s: %w", src, ErrNoSuchPath)
	}
	get, err := containers.CopyToArchive(actx, container, src, out)
	if err != nil {
		return err
	}
	return get()
}
