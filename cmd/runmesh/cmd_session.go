package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Khan/genqlient/graphql"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/runmesh/runmesh/cmd/runmesh/internal/api"
	"github.com/runmesh/runmesh/runnerapi"
	"github.com/runmesh/runmesh/runnerapi/sessionws"
)

// detachKeys end an attach and leave the job running (docker's and
// podman's ctrl-p ctrl-q).
var detachKeys = []byte{0x10, 0x11}

func (a *app) sessionCommands() []*cobra.Command {
	attach := &cobra.Command{
		Use:   "attach JOB-ID",
		Short: "Join a TTY or PIPE job's process: ctrl-p ctrl-q detaches, the process's exit status is the command's",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.session(cmd.Context(), args[0], runnerapi.SessionRequest{Kind: runnerapi.SessionAttach}, true)
		},
	}
	var interactive, tty bool
	exec := &cobra.Command{
		Use:   "exec JOB-ID [-it] -- COMMAND [ARG...]",
		Short: "Run a command in a running job's container; its exit status is the command's",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: runmesh exec JOB-ID [-it] -- COMMAND [ARG...]")
			}
			return a.session(cmd.Context(), args[0], runnerapi.SessionRequest{Kind: runnerapi.SessionExec, Command: args[1:], TTY: tty}, interactive)
		},
	}
	exec.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass this terminal's input to the command")
	exec.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	return []*cobra.Command{attach, exec, a.runCommand(), a.cpCommand()}
}

// session opens a session on the admin listener and passes this
// terminal's bytes until it ends. With input, a terminal is put in raw
// mode (the process's terminal does the echo and line editing), and its
// size follows the window's.
func (a *app) session(ctx context.Context, job string, req runnerapi.SessionRequest, input bool) error {
	var in io.Reader
	if input {
		in = a.stdin
	}
	end, err := a.relay(ctx, job, req, streams{in: in, out: a.stdout, err: a.stderr})
	if err != nil {
		return err
	}
	return a.sessionEnded(ctx, job, end)
}

// streams are a session's ends on this side: in nil for no input.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// relay passes the bytes of one session, and returns how it ended. A
// terminal as input is put in raw mode, and its size follows the window.
func (a *app) relay(ctx context.Context, job string, req runnerapi.SessionRequest, sio streams) (runnerapi.SessionEnd, error) {
	var none runnerapi.SessionEnd
	if err := a.connect(); err != nil {
		return none, err
	}
	url := "ws" + strings.TrimPrefix(a.ep.url, "http") + runnerapi.PathSessions + job
	dialer := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: a.flags.timeout,
		ReadBufferSize: runnerapi.MaxSessionMessage, WriteBufferSize: runnerapi.MaxSessionMessage}
	if tr, ok := a.http.Transport.(bearer).next.(*http.Transport); ok {
		dialer.TLSClientConfig = tr.TLSClientConfig
	}
	in, _ := sio.in.(*os.File)
	out, _ := sio.out.(*os.File)
	raw := in != nil && term.IsTerminal(int(in.Fd()))
	if raw && out != nil && term.IsTerminal(int(out.Fd())) {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil {
			req.Size = runnerapi.Size{Cols: uint16(w), Rows: uint16(h)}
		}
	}
	conn, _, err := dialer.DialContext(ctx, url, nil)
	if err != nil {
		return none, fmt.Errorf("open the session: %w", readable(err))
	}
	defer conn.Close()
	conn.SetReadLimit(runnerapi.MaxSessionMessage)
	req.Token = a.ep.token
	first, _ := json.Marshal(req)
	if err := conn.WriteMessage(websocket.TextMessage, first); err != nil {
		return none, fmt.Errorf("open the session: %w", err)
	}
	var wmu sync.Mutex
	send := func(t runnerapi.FrameType, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return sessionws.WriteFrame(conn, t, p)
	}
	if raw {
		state, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return none, err
		}
		defer term.Restore(int(in.Fd()), state)
		if out != nil {
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					if w, h, err := term.GetSize(int(out.Fd())); err == nil {
						sz, _ := json.Marshal(runnerapi.Size{Cols: uint16(w), Rows: uint16(h)})
						_ = send(runnerapi.FrameResize, sz)
					}
				}
			}()
		}
	}
	if sio.in != nil {
		go sendInput(sio.in, send, raw && req.Kind == runnerapi.SessionAttach)
	}
	frames := sessionws.NewReader(conn)
	for {
		msg, err := frames.Read()
		if err != nil {
			var closed *websocket.CloseError
			if errors.As(err, &closed) {
				return none, sessionRefused(closed)
			}
			return none, fmt.Errorf("the session's connection broke: %w", err)
		}
		f, err := runnerapi.ParseFrame(msg)
		if err != nil {
			return none, err
		}
		switch f.Type {
		case runnerapi.FrameStdout:
			_, err = sio.out.Write(f.Payload)
		case runnerapi.FrameStderr:
			_, err = sio.err.Write(f.Payload)
		case runnerapi.FrameEnd:
			var end runnerapi.SessionEnd
			err := f.Decode(&end)
			return end, err
		}
		if err != nil {
			return none, err
		}
	}
}

// sendInput passes stdin to the session; at its end, the process's input
// ends. detach: ctrl-p ctrl-q in the input ends the session instead, and
// the job runs on.
func sendInput(in io.Reader, send func(runnerapi.FrameType, []byte) error, detach bool) {
	buf := make([]byte, runnerapi.MaxFramePayload)
	var held []byte // a ctrl-p that may begin the detach keys
	for {
		n, err := in.Read(buf)
		p := buf[:n]
		if held != nil {
			p, held = append(held, p...), nil
		}
		if detach {
			if i := bytes.Index(p, detachKeys); i >= 0 {
				if i > 0 {
					_ = send(runnerapi.FrameStdin, p[:i])
				}
				_ = send(runnerapi.FrameEnd, []byte(`{"code":"detached"}`))
				return
			}
			if len(p) > 0 && p[len(p)-1] == detachKeys[0] {
				held, p = []byte{detachKeys[0]}, p[:len(p)-1]
			}
		}
		if len(p) > 0 {
			for len(p) > 0 {
				k := min(len(p), runnerapi.MaxFramePayload)
				if send(runnerapi.FrameStdin, p[:k]) != nil {
					return
				}
				p = p[k:]
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = send(runnerapi.FrameStdinEnd, nil)
			}
			return
		}
	}
}

// sessionEnded turns the session's end into the command's result.
func (a *app) sessionEnded(ctx context.Context, job string, end runnerapi.SessionEnd) error {
	switch end.Code {
	case runnerapi.EndExited:
		if end.Exit != nil && *end.Exit != 0 {
			return exitCode(*end.Exit)
		}
		return nil
	case runnerapi.EndDetached:
		fmt.Fprintf(a.stderr, "\r\ndetached from job %s: it runs on (runmesh attach %s joins it again)\r\n", job, job)
		return nil
	case runnerapi.EndJobEnded:
		// The job's own exit status, once the server has its result.
		return a.waitFor(ctx, job, false)
	}
	return fmt.Errorf("the session ended: %s", sessionSentence(end))
}

// sessionSentence says what an end code means to a person.
func sessionSentence(end runnerapi.SessionEnd) string {
	what := map[string]string{
		runnerapi.EndAgentGone:     "the runner's agent went away (a restart, an upgrade); the job runs on, attach again once it is back",
		runnerapi.EndServerGone:    "the server holding the session went away; the job runs on, attach again",
		runnerapi.EndRevoked:       "the token expired or was revoked",
		runnerapi.EndTooMany:       "too many sessions open on this job, its runner or this token",
		runnerapi.EndFrameTooLarge: "a frame over the bound of 32 KiB",
		runnerapi.EndBadFrame:      "a malformed frame",
		runnerapi.EndUnavailable:   "the job's agent cannot be reached: the job is not running, or its agent is away",
		runnerapi.EndFailed:        "the runner could not open it",
	}[end.Code]
	if what == "" {
		what = end.Code
	}
	if end.Reason != "" && !strings.Contains(what, end.Reason) {
		what += " (" + end.Reason + ")"
	}
	return what
}

// sessionRefused says why the server closed the socket without an end
// frame: it refused the session before it began, or the connection broke.
func sessionRefused(c *websocket.CloseError) error {
	switch c.Code {
	case 4403:
		return fmt.Errorf("the session was refused: %s (is the token still valid?)", c.Text)
	case 4404:
		return fmt.Errorf("no such job (or not one of yours): %s", c.Text)
	case websocket.CloseAbnormalClosure: // no close frame: the connection itself ended
		return errors.New("the session's connection broke: the server went away or the network failed; the job runs on, attach again")
	}
	return fmt.Errorf("the session was refused: %s (close code %d)", c.Text, c.Code)
}

// runCommand is `runmesh run -it IMAGE -- CMD`: submit an interactive
// job, wait for it to run (saying what it waits for), attach.
func (a *app) runCommand() *cobra.Command {
	var in api.SubmitJobInput
	var pool, selector string
	var wall, idle time.Duration
	var env []string
	var interactive, tty bool
	c := &cobra.Command{
		Use:   "run -it [--pool POOL] [--gpus N ...] IMAGE -- COMMAND [ARG...]",
		Short: "Submit an interactive job, wait for it to run, and attach: a session on a runner in one command",
		Long: `Submit an interactive job (-i: its stdin is yours; -t: with a terminal), wait until it runs, and
attach to it as runmesh attach does: ctrl-p ctrl-q detaches and leaves it running, and its exit
status is the command's. --env NAME passes NAME with its value from this environment.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: runmesh run -it [flags] IMAGE -- COMMAND [ARG...]")
			}
			if !interactive {
				return errors.New("run is for interactive jobs: -i (and -t for a terminal); submit-job --wait runs a batch job")
			}
			ctx := cmd.Context()
			id, err := a.poolID(ctx, pool)
			if err != nil {
				return err
			}
			in.PoolId, in.Image, in.Command, in.Selector = id, args[0], args[1:], opt(selector)
			in.Claim.WallClockSeconds = int(wall.Seconds())
			mode := "pipe"
			if tty {
				mode = "tty"
			}
			if err := stdioFlags(&in, mode, idle, a.changed("idle-timeout")); err != nil {
				return err
			}
			for _, name := range env {
				v := a.getenv(name)
				if v == "" {
					return fmt.Errorf("--env %s: it is not set in this environment", name)
				}
				in.Env = append(in.Env, api.EnvVarInput{Name: name, Value: v})
			}
			out, err := call(ctx, a, func(ctx context.Context, c graphql.Client) (*api.SubmitJobResponse, error) {
				return api.SubmitJob(ctx, c, in)
			})
			if err != nil {
				return err
			}
			job := out.SubmitJob.Id
			if err := a.waitRunning(ctx, job); err != nil {
				return err
			}
			return a.session(ctx, job, runnerapi.SessionRequest{Kind: runnerapi.SessionAttach}, true)
		},
	}
	f := c.Flags()
	f.BoolVarP(&interactive, "interactive", "i", false, "pass this terminal's input to the job")
	f.BoolVarP(&tty, "tty", "t", false, "give the job a terminal")
	f.StringVar(&pool, "pool", "default", "the pool (id or name)")
	f.Float64Var(&in.Claim.Cores, "cores", 1, "cores it claims")
	f.IntVar(&in.Claim.MemoryMiB, "memory-mib", 0, "memory it claims (MiB)")
	f.IntVar(&in.Claim.Gpus, "gpus", 0, "GPUs it claims")
	f.BoolVar(&in.Network, "network", false, "a network (the pool must allow it)")
	f.DurationVar(&wall, "wall-clock", time.Hour, "how long it may run")
	f.DurationVar(&idle, "idle-timeout", 0, "stop it after this long without a byte in either direction (1m to 168h)")
	f.StringVar(&selector, "selector", "", "which runners may take it, by their labels")
	f.StringVar(&in.Kind, "kind", "default", "the kind of runner it needs")
	f.StringArrayVar(&env, "env", nil, "pass this variable with its value from this environment (repeatable)")
	in.MaxAttempts = 1 // a session's state is its terminal: never run it again elsewhere
	return c
}

// waitRunning waits for the job to run, saying on stderr what it waits
// for; a job that ends first is the error.
func (a *app) waitRunning(ctx context.Context, job string) error {
	said := ""
	for {
		out, err := call(ctx, a, func(ctx context.Context, c graphql.Client) (*api.JobProgressResponse, error) {
			return api.JobProgress(ctx, c, job)
		})
		if err != nil {
			return err
		}
		if out.Job == nil {
			return fmt.Errorf("no job %s", job)
		}
		var now string
		switch out.Job.State {
		case api.JobStateRunning:
			fmt.Fprintf(a.stderr, "job %s runs: attaching (ctrl-p ctrl-q detaches)\r\n", job)
			return nil
		case api.JobStateQueued:
			now = "queued: waiting for a runner with room"
		case api.JobStateBlocked:
			now = "blocked: " + out.Job.StateReason
		case api.JobStateLeased:
			now = "leased: the runner pulls the image and starts the container"
		default:
			return fmt.Errorf("job %s %s before it ran: %s", job, out.Job.State, out.Job.StateReason)
		}
		if now != said {
			fmt.Fprintf(a.stderr, "job %s %s\n", job, now)
			said = now
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s is still %s (runmesh attach %s joins it once it runs; runmesh cancel-job %s ends it): %w",
				job, strings.ToLower(string(out.Job.State)), job, job, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
