package runnerhttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

type callerKey struct{}

// caller is the authenticated runner and the certificate it presented.
type caller struct {
	runner record.Runner
	serial string
	expiry time.Time
}

// authenticated admits requests carrying a client certificate of an
// approved runner whose certificate is still good. It re-checks on every
// request, not only at the handshake: a connection opened before a
// revocation, or kept alive past its certificate's expiry, must not keep
// working. Admin bearer tokens mean nothing here.
func (s *Server) authenticated(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deny := func(msg string) {
			writeError(w, http.StatusUnauthorized, runnerapi.CodeUnauthenticated, msg)
		}
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			deny("a runner client certificate is required")
			return
		}
		leaf := r.TLS.PeerCertificates[0]
		if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			deny("the client certificate is not valid now")
			return
		}
		idStr, ok := pki.RunnerID(leaf)
		id, err := uuid.Parse(idStr)
		if !ok || err != nil {
			deny("not a runner certificate")
			return
		}
		serial := leaf.SerialNumber.String()
		who, err := s.ids.lookup(r.Context(), serial, id)
		if errors.Is(err, record.ErrNotFound) {
			deny("unknown runner")
			return
		}
		if err != nil {
			s.internal(w, r, "authenticate runner", err)
			return
		}
		if !who.standing.Usable() {
			deny("certificate revoked, or its runner is not approved")
			return
		}
		ctx := context.WithValue(r.Context(), callerKey{}, caller{runner: who.runner, serial: serial, expiry: leaf.NotAfter})
		next(w, r.WithContext(ctx))
	})
}

func callerFrom(ctx context.Context) caller { return ctx.Value(callerKey{}).(caller) }

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	c := callerFrom(r.Context())
	resp := runnerapi.WhoAmIResponse{
		RunnerID: c.runner.ID.String(), Name: c.runner.Name, PoolID: c.runner.PoolID.String(),
		CertificateSerial: c.serial, CertificateNotAfter: c.expiry.UTC(),
	}
	if c.runner.OrganisationID != nil {
		resp.OrganisationID = c.runner.OrganisationID.String()
	}
	writeJSON(w, http.StatusOK, resp)
}
