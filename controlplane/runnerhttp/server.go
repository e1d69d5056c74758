// Package runnerhttp is the runner listener: enrolment, the long-poll
// that hands an approved runner its certificate, the mutual-TLS runner API,
// and step-ca's own endpoints. The organisation and pool of a request come
// from the runner's row, never from the request.
package runnerhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/objects"
	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// Options configure the runner listener's handlers.
type Options struct {
	Store      *store.Store
	Authority  *ca.Authority
	Enrolment  *enrolment.Service
	Listener   *store.Listener
	Heartbeats *fleet.Writer
	Log        *slog.Logger
	// DefaultLeaseSeconds is the lease of pools without their own; a
	// runner heartbeats every third of it.
	DefaultLeaseSeconds int
	// HeartbeatLatency observes how long each heartbeat took, storage
	// included, if set.
	HeartbeatLatency prometheus.Observer
	// Queue claims jobs for runners and ends their attempts.
	Queue *queue.Service
	// QuarantineAfter host faults in a row quarantine a runner.
	QuarantineAfter int
	// Version is the server's, as step-ca's /version tells it.
	Version string
	// Storage presigns the URLs of jobs' object keys (nil: none).
	Storage *objects.Bucket
}

// Server serves the runner API.
type Server struct {
	o        Options
	ids      *identities
	finisher *queue.Finisher
	names    *names
}

// New returns the runner API. Run it for the life of the listener.
func New(o Options) *Server {
	o.Log = o.Log.With("component", "runnerapi")
	if o.QuarantineAfter == 0 {
		o.QuarantineAfter = queue.DefaultQuarantineAfter
	}
	return &Server{o: o, ids: newIdentities(o.Store), finisher: o.Queue.Finisher(o.QuarantineAfter), names: newNames(o.Store)}
}

// Run keeps the identity cache honest until ctx ends.
func (s *Server) Run(ctx context.Context) { s.ids.watch(ctx, s.o.Listener) }

// Heard drops what a runner change names (see store.OnRunnerChange): call
// it when this replica has just changed a runner or revoked a certificate,
// so its next request does not wait for the notification.
func (s *Server) Heard(channel, payload string) { s.ids.heard(channel, payload) }

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
	mux.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, runnerapi.CodeNotFound, "no such route")
	}))
	// Everything else is step-ca's: bootstrap, renewal and revocation.
	mux.Handle("/", peers.limit(s.o.Authority.StepHandler(s.o.Version)))
	return mux
}

// TLSConfig is the listener's TLS: our server certificate, and client
// certificates verified against our CA when a client offers one (enrolment
// and bootstrap happen before a runner has one). A certificate that is
// revoked, unknown, or belongs to a runner that is not approved fails the
// handshake; requests on connections opened before a revocation are caught
// per request.
func (s *Server) TLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(s.o.Authority.Keys().Root)
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
			leaf := cs.PeerCertificates[0]
			runnerID := uuid.Nil
			if id, ok := pki.RunnerID(leaf); ok {
				runnerID, _ = uuid.Parse(id)
			}
			who, err := s.ids.lookup(ctx, leaf.SerialNumber.String(), runnerID)
			if err != nil {
				return fmt.Errorf("check client certificate: %w", err)
			}
			if !who.standing.Usable() {
				return errors.New("client certificate revoked or unknown")
			}
			return nil
		},
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, runnerapi.Error{Error: runnerapi.ErrorBody{Code: code, Message: msg}})
}

// decode reads exactly one JSON object with no unknown fields, within
// runnerapi.MaxBodyBytes.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeWithin(w, r, v, runnerapi.MaxBodyBytes)
}

// decodeStrict decodes one JSON object of v's fields alone.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// decodeWithin is decode within limit bytes.
func decodeWithin(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && !utf8.Valid(body) {
		// JSON decoders put U+FFFD for such bytes: what was sent would be
		// kept as something else.
		err = errors.New("the body is not valid UTF-8")
	}
	if err == nil {
		err = decodeStrict(body, v)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, runnerapi.CodeTooLarge, fmt.Sprintf("request body over %d bytes", limit))
	default:
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "malformed request: "+err.Error())
	}
	return false
}
