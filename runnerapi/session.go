package runnerapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// A session is one person's attach to (or exec in) a running job: bytes
// between their terminal and the job's process, relayed by the control
// plane between the admin's WebSocket (/sessions/{jobId}) and a WebSocket
// the agent dialled out on the runner listener (PathSession). Both carry
// the same frames, one per binary message: a type byte, then the payload.
// The bytes are never stored.

// PathSession is where the agent holds a stream for a lease's sessions,
// fenced by attempt: the server answers with FrameOpen when someone
// attaches, and the stream is then that session's.
func PathSession(leaseID string) string { return "/v1/leases/" + leaseID + "/session" }

// FrameType is a frame's first byte.
type FrameType byte

const (
	// FrameOpen, server to agent: a session begins (SessionOpen, JSON).
	FrameOpen FrameType = 'o'
	// FrameStdin: bytes for the process's standard input.
	FrameStdin FrameType = 'i'
	// FrameStdinEnd: no more input (PIPE: the process reads end of file).
	FrameStdinEnd FrameType = 'e'
	// FrameResize: the terminal's new size (Size, JSON); TTY only.
	FrameResize FrameType = 'r'
	// FrameStdout and FrameStderr: the process's output. A TTY has one
	// stream, stdout.
	FrameStdout FrameType = '1'
	FrameStderr FrameType = '2'
	// FrameEnd: the session is over (SessionEnd, JSON), the last frame
	// either way.
	FrameEnd FrameType = 'x'
)

// MaxFramePayload bounds one frame's payload: a writer splits larger
// writes, a reader refuses larger frames (SessionFrameTooLarge).
const MaxFramePayload = 32 << 10

// Session kinds.
const (
	SessionAttach = "attach" // to the job's own process (TTY or PIPE jobs)
	SessionExec   = "exec"   // a new process in the job's container
	SessionCopy   = "cp"     // a tar stream into or out of the job's container (Command: CopyIn, CopyOut)
)

// A cp session's Command: its direction, then its paths. The tar stream
// goes through the container engine's archive API, not a process in the
// container: it needs no tar there, and it is as fast as the engine's
// own copy.
const (
	// CopyIn: ["in", DST, NAME]. The person sends a tar stream whose top
	// entry is NAME (stdin, then stdin_end); it lands in DST when DST is
	// a directory in the container, else as DST.
	CopyIn = "in"
	// CopyOut: ["out", SRC]. The agent sends SRC as a tar stream (stdout)
	// whose top entry is SRC's base name.
	CopyOut = "out"
)

// CheckCopy checks a cp session's Command.
func CheckCopy(cmd []string) error {
	switch {
	case len(cmd) == 3 && cmd[0] == CopyIn:
		if cmd[2] == "" || cmd[2] == "." || cmd[2] == ".." || strings.ContainsRune(cmd[2], '/') {
			return fmt.Errorf("cp in: the name %q is not one file name", cmd[2])
		}
	case len(cmd) == 2 && cmd[0] == CopyOut:
	default:
		return errors.New(`cp: the command is ["in", DST, NAME] or ["out", SRC]`)
	}
	for i, a := range cmd {
		if err := CheckArg(a); err != nil {
			return fmt.Errorf("cp: command[%d]: %w", i, err)
		}
	}
	if cmd[1] == "" {
		return errors.New("cp: a path in the container is needed")
	}
	return nil
}

// SessionOpen says what a session is.
type SessionOpen struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Command is what exec runs; empty for attach.
	Command []string `json:"command,omitempty"`
	// TTY: exec gives the process a terminal (attach follows the job's
	// mode).
	TTY  bool `json:"tty,omitempty"`
	Size Size `json:"size"`
}

// Size is a terminal's, in characters.
type Size struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// SessionEnd is why a session ended. Exit is the exec'd process's status
// (attach: the job's, when it ended), nil when it did not end.
type SessionEnd struct {
	Exit   *int   `json:"exit,omitempty"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// SessionEnd codes, stable: the CLI turns each into a sentence.
const (
	EndExited        = "exited"          // the process ended (Exit says how)
	EndDetached      = "detached"        // the person detached; the job runs on
	EndAgentGone     = "agent_gone"      // the agent went away (restart, upgrade): the job runs on
	EndServerGone    = "server_gone"     // the server replica holding the session went away
	EndRevoked       = "revoked"         // the token, or the runner, no longer authenticates
	EndJobEnded      = "job_ended"       // the job ended (or its lease moved on)
	EndTooMany       = "too_many"        // past a bound on sessions
	EndFrameTooLarge = "frame_too_large" // a frame past MaxFramePayload
	EndBadFrame      = "bad_frame"       // a frame of no known type, or bad JSON
	EndUnavailable   = "unavailable"     // the job has no agent stream to reach (not running, or its agent is away)
	EndFailed        = "failed"          // the agent could not attach or exec (Reason says why)
)

// Frame is one decoded frame.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// ErrFrameTooLarge: a frame past MaxFramePayload.
var ErrFrameTooLarge = errors.New("session frame too large")

// AppendFrame appends the frame to b.
func AppendFrame(b []byte, t FrameType, payload []byte) []byte {
	return append(append(b, byte(t)), payload...)
}

// JSONFrame is a frame whose payload is v as JSON.
func JSONFrame(t FrameType, v any) []byte {
	p, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types, which always marshal
	}
	return AppendFrame(nil, t, p)
}

// ParseFrame reads one message. The payload aliases msg.
func ParseFrame(msg []byte) (Frame, error) {
	if len(msg) == 0 {
		return Frame{}, errors.New("empty session frame")
	}
	if len(msg)-1 > MaxFramePayload {
		return Frame{}, ErrFrameTooLarge
	}
	t := FrameType(msg[0])
	switch t {
	case FrameOpen, FrameStdin, FrameStdinEnd, FrameResize, FrameStdout, FrameStderr, FrameEnd:
	default:
		return Frame{}, fmt.Errorf("session frame of unknown type %q", msg[0])
	}
	return Frame{Type: t, Payload: msg[1:]}, nil
}

// Decode reads the frame's JSON payload into v (fields it does not know,
// from a newer peer, are ignored).
func (f Frame) Decode(v any) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("session frame %q: %w", f.Type, err)
	}
	return nil
}

// MaxSessionMessage is the largest WebSocket message of a session: one
// frame, its type byte and MaxFramePayload.
const MaxSessionMessage = 1 + MaxFramePayload

// CloseCode is the WebSocket close code a session's end closes with, for
// clients that read no frames: 4403 (revoked, as the admin API's sockets),
// 4429 (too many), 4404 (unavailable), 1009 (frame too large), 1008 (a bad
// frame), 1011 (failed), 1001 (a side went away), 1000 otherwise.
func (e SessionEnd) CloseCode() int {
	switch e.Code {
	case EndRevoked:
		return 4403
	case EndTooMany:
		return 4429
	case EndUnavailable:
		return 4404
	case EndFrameTooLarge:
		return 1009
	case EndBadFrame:
		return 1008
	case EndFailed:
		return 1011
	case EndAgentGone, EndServerGone:
		return 1001
	}
	return 1000
}

// PathSessions is where a person opens a session on the admin listener
// (a WebSocket): PathSessions + the job's id.
const PathSessions = "/sessions/"

// SessionRequest is the person's first message on PathSessions, as text:
// their admin token (never in the URL, where logs would keep it) and what
// to open.
type SessionRequest struct {
	Token   string   `json:"token"`
	Kind    string   `json:"kind"`
	Command []string `json:"command,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Size    Size     `json:"size"`
}

// MaxExecArgs bounds an exec'd command line's words.
const MaxExecArgs = 256
