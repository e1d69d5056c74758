package runnerhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/runnerapi"
)

// upgrader takes an agent's session stream. Agents are not browsers: no
// Origin is checked (the client certificate is what authenticates).
var upgrader = websocket.Upgrader{
	HandshakeTimeout: 10 * time.Second,
	ReadBufferSize:   runnerapi.MaxSessionMessage,
	WriteBufferSize:  runnerapi.MaxSessionMessage,
	CheckOrigin:      func(*http.Request) bool { return true },
}

// session holds an agent's stream for a lease's next session, fenced by
// attempt (?attempt=N): a stale attempt's is refused before the upgrade,
// with 409 stale_attempt, and nothing changes. Once upgraded, the stream
// is the relay's, and the listener's read deadline and body limit no
// longer apply: the relay has its own bounds.
func (s *Server) session(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	attempt, err := strconv.Atoi(r.URL.Query().Get("attempt"))
	if err != nil {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "?attempt= must be the attempt the runner holds")
		return
	}
	if err := s.o.Leases.SessionStream(r.Context(), c.Runner, id, attempt); err != nil {
		s.fail(w, r, "session", err)
		return
	}
	lease := relay.Lease{ID: id, Attempt: attempt, RunnerID: c.Runner.ID}
	if s.o.Relay == nil || !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "a session stream is a WebSocket")
		return
	}
	// The runner's certificate is checked again while the stream lasts: a
	// runner revoked (or its certificate) loses its streams.
	leaf := r.TLS.PeerCertificates[0]
	lease.Standing = func(ctx context.Context) (bool, error) {
		_, err := s.o.Enrolment.Authenticate(ctx, leaf, time.Now())
		var refusal *runnerapi.ErrorBody
		if errors.As(err, &refusal) {
			return false, nil
		}
		return err == nil, err
	}
	conn, err := upgrader.Upgrade(relay.Hijackable(w), r, nil)
	if err != nil {
		return // the upgrader answered
	}
	_ = conn.NetConn().SetDeadline(time.Time{})
	_ = s.o.Relay.Stand(r.Context(), lease, relay.WebSocket(conn))
}
