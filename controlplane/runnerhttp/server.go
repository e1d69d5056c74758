// Package runnerhttp is the runner listener: it translates. Each handler
// decodes a request, authenticates the runner, calls one method of the
// domain package that owns the decision (enrolment: enrol, wait, who a
// certificate belongs to, step-ca's renewal; fleet: the heartbeat; queue:
// leases, output, results), and encodes the answer or the refusal. It
// imports no store, opens no transaction and decides nothing (its deps
// test says so); the organisation and pool of a request come from the
// runner's row, which enrolment reads, never from the request.
package runnerhttp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/runnerapi"
)

// Options are the domain the handlers speak to.
type Options struct {
	Enrolment  *enrolment.Service
	Heartbeats *fleet.Heartbeats
	Leases     *queue.Leases
	// Relay holds the agents' streams for sessions (attach, exec).
	Relay *relay.Hub
	Log   *slog.Logger
	// Version is the server's, as step-ca's /version tells it.
	Version string
}

// Server serves the runner API.
type Server struct{ o Options }

// New returns the runner API.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Log = o.Log.With("component", "runnerapi")
	return &Server{o: o}
}

// Handler routes the runner listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	peers := newPeerLimit(MaxUnauthenticatedPerPeer)
	mux.Handle("POST "+runnerapi.PathEnrol, peers.limit(http.HandlerFunc(s.enrol)))
	mux.Handle("POST /v1/enrol/{id}/wait", peers.limit(http.HandlerFunc(s.wait)))
	mux.Handle("GET "+runnerapi.PathWhoAmI, s.authenticated(s.whoami))
	mux.Handle("POST "+runnerapi.PathHeartbeat, s.authenticated(s.heartbeat))
	mux.Handle("POST "+runnerapi.PathLeases, s.authenticated(s.leases))
	mux.Handle("POST /v1/leases/{id}/logs", s.authenticated(s.logs))
	mux.Handle("POST /v1/leases/{id}/result", s.authenticated(s.result))
	mux.Handle("POST "+runnerapi.PathResults, s.authenticated(s.results))
	mux.Handle("GET /v1/leases/{id}/session", s.authenticated(s.session))
	mux.HandleFunc("GET "+relay.LendPath+"{id}/session", s.lend)
	mux.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, runnerapi.CodeNotFound, "no such route")
	}))
	// Everything else is step-ca's: bootstrap, renewal and revocation.
	mux.Handle("/", peers.limit(s.o.Enrolment.StepHandler(s.o.Version)))
	return mux
}

// TLSConfig is the listener's TLS: our server certificate, and client
// certificates verified against our CA when a client offers one
// (enrolment and bootstrap happen before a runner has one). enrolment
// refuses at the handshake a certificate that is revoked, unknown, or
// whose runner is not approved; requests on connections opened before a
// revocation are caught per request.
func (s *Server) TLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(s.o.Enrolment.Root())
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCertificate,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      clientCAs,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.o.Enrolment.CheckPeer(ctx, cs.PeerCertificates[0])
		},
	}
}

type callerKey struct{}

// authenticated admits requests whose client certificate enrolment
// recognises, every request anew. Admin bearer tokens mean nothing here.
func (s *Server) authenticated(next func(http.ResponseWriter, *http.Request, enrolment.Caller)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var leaf *x509.Certificate
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			leaf = r.TLS.PeerCertificates[0]
		}
		c, err := s.o.Enrolment.Authenticate(r.Context(), leaf, time.Now())
		if err != nil {
			s.fail(w, r, "authenticate runner", err)
			return
		}
		next(w, r, c)
	})
}

// statusOf is the HTTP status of each refusal's code.
var statusOf = map[string]int{
	runnerapi.CodeBadRequest:       http.StatusBadRequest,
	runnerapi.CodeInvalidKey:       http.StatusBadRequest,
	runnerapi.CodeInvalidCSR:       http.StatusBadRequest,
	runnerapi.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	runnerapi.CodeLogLimit:         http.StatusRequestEntityTooLarge,
	runnerapi.CodeUnauthenticated:  http.StatusUnauthorized,
	runnerapi.CodeTokenRefused:     http.StatusForbidden,
	runnerapi.CodeForbidden:        http.StatusForbidden,
	runnerapi.CodeNotFound:         http.StatusNotFound,
	runnerapi.CodeConflict:         http.StatusConflict,
	runnerapi.CodeStaleAttempt:     http.StatusConflict,
	runnerapi.CodeRecoveryRequired: http.StatusConflict,
	runnerapi.CodeTooMany:          http.StatusTooManyRequests,
	runnerapi.CodeRetry:            http.StatusServiceUnavailable,
}

// fail answers a request the domain refused or could not serve: a
// refusal with its own code; a database that cannot serve now with 503
// retry (nothing changed; send it again, as Retry-After says); anything
// else with 500 internal, logged here. A request already gone gets
// nothing.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	var refusal *runnerapi.ErrorBody
	switch {
	case errors.As(err, &refusal):
		status, ok := statusOf[refusal.Code]
		if !ok {
			status = http.StatusBadRequest
		}
		if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, status, refusal.Code, refusal.Message)
	case r.Context().Err() != nil:
		// Gone (the runner left, or this replica stops): no one to answer.
	case errors.Is(err, record.ErrUnavailable):
		s.o.Log.WarnContext(r.Context(), op+": the database is unavailable", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, runnerapi.CodeRetry, "the database is unavailable; nothing changed: send the request again")
	default:
		s.o.Log.ErrorContext(r.Context(), op, "err", err)
		writeError(w, http.StatusInternalServerError, runnerapi.CodeInternal, "internal error")
	}
}
