package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/runnerapi"
)

// SessionOptions configure /sessions/{jobId}.
type SessionOptions struct {
	Tenancy *tenancy.Service
	Queue   *queue.Service
	Relay   *relay.Hub
	Log     *slog.Logger
	// InitTimeout bounds the wait for the first message; Recheck is how
	// often the token is checked again (0: the admin API's defaults).
	InitTimeout, Recheck time.Duration
}

var sessionUpgrader = websocket.Upgrader{
	HandshakeTimeout: 10 * time.Second,
	ReadBufferSize:   runnerapi.MaxSessionMessage,
	WriteBufferSize:  runnerapi.MaxSessionMessage,
	// The token comes in the first message, never from a cookie: a page
	// of another origin gains nothing a script of its own would not have.
	CheckOrigin: func(*http.Request) bool { return true },
}

// NewSessionHandler serves people's sessions (attach, exec) on running
// jobs: a WebSocket whose first message is a runnerapi.SessionRequest
// (its token, as connection_init carries it), then frames both ways until
// the session ends. Who may: a platform admin, an organisation admin for
// the organisation's jobs, a member for the jobs they submitted; anyone
// else is told "no such job", as for a job that does not exist, and only
// the refusal is recorded. Each session is an audit entry (jobSession):
// who, which job, what was opened, when, bytes each way; never its bytes.
func NewSessionHandler(o SessionOptions) http.Handler {
	if o.InitTimeout == 0 {
		o.InitTimeout = DefaultSocketInitTimeout
	}
	if o.Recheck == 0 {
		o.Recheck = DefaultSocketRecheck
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	logins := newLoginLimit(DefaultFailedLogins, time.Minute)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			http.Error(w, "a session is a WebSocket", http.StatusBadRequest)
			return
		}
		c, err := sessionUpgrader.Upgrade(relay.Hijackable(w), r, nil)
		if err != nil {
			return
		}
		_ = c.NetConn().SetDeadline(time.Time{})
		(&sessionConn{o: o, c: c, logins: logins, remote: remoteHost(r.RemoteAddr)}).serve(r.Context(), r.PathValue("jobId"))
	})
}

type sessionConn struct {
	o      SessionOptions
	c      *websocket.Conn
	logins *loginLimit
	remote string
}

// refuse closes the socket before a session began.
func (s *sessionConn) refuse(code int, reason string) {
	_ = s.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	_ = s.c.Close()
}

// Close codes of a refused session request.
const (
	closeBadRequest = 4400
	closeNotFound   = 4404
	closeConflict   = 4409 // the job is in no state for it (not running, not interactive)
	closeInternal   = 1011
)

func (s *sessionConn) serve(ctx context.Context, jobArg string) {
	s.c.SetReadLimit(runnerapi.MaxSessionMessage)
	_ = s.c.SetReadDeadline(time.Now().Add(s.o.InitTimeout))
	t, first, err := s.c.ReadMessage()
	if err != nil {
		s.refuse(closeInitTimeout, "no session request in time")
		return
	}
	_ = s.c.SetReadDeadline(time.Time{})
	var req runnerapi.SessionRequest
	if t != websocket.TextMessage || json.Unmarshal(first, &req) != nil {
		s.refuse(closeBadRequest, "the first message must be a session request (JSON text)")
		return
	}
	if !s.logins.allowed(s.remote) {
		s.refuse(closeTooManyRequests, "too many failed logins")
		return
	}
	token := req.Token
	if tok, ok := cutBearer(token); ok {
		token = tok
	}
	me, err := s.o.Tenancy.Authenticate(ctx, token)
	if err != nil {
		if errors.Is(err, tenancy.ErrUnauthenticated) {
			s.logins.failed(s.remote)
		}
		s.refuse(closeForbidden, "unauthenticated")
		return
	}
	entry := record.AuditEntry{Action: "jobSession", ActorID: &me.ID, ActorName: me.Name, ActorRole: me.Role, OrganisationID: me.OrganisationID}
	detail := map[string]any{"job": jobArg, "kind": req.Kind}
	if req.Kind == runnerapi.SessionExec || req.Kind == runnerapi.SessionCopy {
		detail["command"] = req.Command
	}
	write := func(outcome string) {
		entry.Outcome = outcome
		entry.Detail, _ = json.Marshal(detail)
		if err := s.o.Tenancy.Audit(context.WithoutCancel(ctx), entry); err != nil {
			s.o.Log.ErrorContext(ctx, "audit log write failed", "action", entry.Action, "err", err)
		}
	}
	job, code, why := s.target(ctx, me, jobArg, req)
	if code != 0 {
		outcome := map[int]string{closeBadRequest: "BAD_INPUT", closeNotFound: "NOT_FOUND", closeConflict: "CONFLICT"}[code]
		write(outcome)
		s.refuse(code, why)
		return
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchToken(ctx, s.o.Tenancy, me.TokenID.String(), token, s.o.Recheck, func() {
		cancel(&relay.EndError{End: runnerapi.SessionEnd{Code: runnerapi.EndRevoked, Reason: "the token expired or was revoked"}})
	})
	sessionID := uuid.New()
	open := runnerapi.SessionOpen{ID: sessionID.String(), Kind: req.Kind, Command: req.Command, TTY: req.TTY, Size: req.Size}
	if req.Kind == runnerapi.SessionAttach {
		open.TTY = job.Options.Stdio == runnerapi.StdioTTY
	}
	// Job.sessions: the row as it opens, its end after.
	if err := s.o.Queue.OpenSession(ctx, record.JobSession{ID: sessionID, JobID: job.ID, Attempt: job.Attempt, AdminID: &me.ID,
		AdminName: me.Name, Kind: req.Kind, Command: req.Command}); err != nil {
		s.o.Log.ErrorContext(ctx, "recording a session failed", "job", job.ID, "err", err)
		write("INTERNAL")
		s.refuse(closeInternal, "the server could not record the session")
		return
	}
	sum := s.o.Relay.Open(ctx, relay.Target{Lease: relay.Lease{ID: job.ID, Attempt: job.Attempt, RunnerID: *job.RunnerID}, TokenID: me.TokenID},
		open, relay.WebSocket(s.c))
	if err := s.o.Queue.EndSession(context.WithoutCancel(ctx), sessionID, sum.BytesIn, sum.BytesOut, sum.End.Code); err != nil {
		s.o.Log.ErrorContext(ctx, "recording a session's end failed", "job", job.ID, "session", sessionID, "err", err)
	}
	detail["session"] = open.ID
	detail["started"], detail["ended"] = sum.Started.UTC(), sum.Ended.UTC()
	detail["bytes_in"], detail["bytes_out"] = sum.BytesIn, sum.BytesOut
	detail["end"] = sum.End.Code
	if sum.End.Exit != nil {
		detail["exit"] = *sum.End.Exit
	}
	write(outcomeSuccess)
}

// target is the job the request may open a session on, or the close code
// and reason of a refusal.
func (s *sessionConn) target(ctx context.Context, me record.Admin, jobArg string, req runnerapi.SessionRequest) (record.Job, int, string) {
	id, err := uuid.Parse(jobArg)
	if err != nil {
		return record.Job{}, closeNotFound, "no such job"
	}
	job, err := s.o.Queue.Job(ctx, me.Scope(), id)
	if err != nil || me.Role == record.RoleOrgMember && (job.SubmittedBy == nil || *job.SubmittedBy != me.ID) {
		// Not found, or not theirs: the same answer.
		return record.Job{}, closeNotFound, "no such job"
	}
	switch req.Kind {
	case runnerapi.SessionAttach:
		if !job.Options.Stdio.Interactive() {
			return job, closeConflict, "the job is not interactive (stdio LOGS): its output is in runmesh logs; exec opens a process beside it"
		}
	case runnerapi.SessionExec:
		if len(req.Command) == 0 || len(req.Command) > runnerapi.MaxExecArgs {
			return job, closeBadRequest, fmt.Sprintf("exec needs a command of 1 to %d words", runnerapi.MaxExecArgs)
		}
		for i, a := range req.Command {
			if err := runnerapi.CheckArg(a); err != nil {
				return job, closeBadRequest, fmt.Sprintf("command[%d]: %v", i, err)
			}
		}
	case runnerapi.SessionCopy:
		if err := runnerapi.CheckCopy(req.Command); err != nil {
			return job, closeBadRequest, err.Error()
		}
	default:
		return job, closeBadRequest, `kind must be "attach", "exec" or "cp"`
	}
	if job.State != record.JobRunning || job.RunnerID == nil {
		return job, closeConflict, fmt.Sprintf("the job is %s, not RUNNING", job.State)
	}
	return job, 0, ""
}
