package runnerhttp

import (
	"context"
	"crypto/x509"
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

// lend answers another replica that holds a person's socket for a lease
// whose agent's stream stands here (relay.LendPath): with the replica's
// certificate only, never a runner's. No stream standing here is 404
// not_found before the upgrade; once upgraded, the relay joins the two.
func (s *Server) lend(w http.ResponseWriter, r *http.Request) {
	var leaf *x509.Certificate
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		leaf = r.TLS.PeerCertificates[0]
	}
	if _, err := s.o.Enrolment.AuthenticateReplica(r.Context(), leaf, time.Now()); err != nil {
		s.fail(w, r, "authenticate replica", err)
		return
	}
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	attempt, err := strconv.Atoi(r.URL.Query().Get("attempt"))
	if err != nil {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "?attempt= must be the attempt the session is for")
		return
	}
	if s.o.Relay == nil || !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "a relayed session is a WebSocket")
		return
	}
	lent := s.o.Relay.Lend(r.Context(), id, attempt, func() (relay.Conn, error) {
		conn, err := upgrader.Upgrade(relay.Hijackable(w), r, nil)
		if err != nil {
			return nil, err // the upgrader answered
		}
		_ = conn.NetConn().SetDeadline(time.Time{})
		return relay.WebSocket(conn), nil
	})
	if !lent {
		writeError(w, http.StatusNotFound, runnerapi.CodeNotFound, "no stream for this lease stands on this replica")
	}
}
