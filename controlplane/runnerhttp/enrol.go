package runnerhttp

import (
	"crypto/ed25519"
	"crypto/subtle"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/fleet"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

var runnerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// enrol creates a PENDING runner. Everything is checked before the token is
// touched, and the token is consumed in the same transaction that creates
// the runner, so a refused request changes nothing.
func (s *Server) enrol(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.EnrolRequest
	if !decode(w, r, &req) {
		return
	}
	if !runnerName.MatchString(req.Name) {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "name: 1 to 63 letters, digits, dots, dashes and underscores")
		return
	}
	if len(req.PublicKey) != ed25519.PublicKeySize {
		writeError(w, http.StatusBadRequest, runnerapi.CodeInvalidKey, "public_key: runner keys are Ed25519 (32 bytes)")
		return
	}
	pub := ed25519.PublicKey(req.PublicKey)
	csr, err := pki.ParseCSR([]byte(req.CSR))
	if err != nil {
		writeError(w, http.StatusBadRequest, runnerapi.CodeInvalidCSR, "csr: "+err.Error())
		return
	}
	if len(csr.Extensions) > 0 {
		// The CA ignores them anyway; a runner has no business asking.
		writeError(w, http.StatusBadRequest, runnerapi.CodeInvalidCSR, "csr: a runner's certificate request carries no extensions (no names, no usages)")
		return
	}
	csrKey, ok := csr.PublicKey.(ed25519.PublicKey)
	if !ok || subtle.ConstantTimeCompare(csrKey, pub) != 1 {
		writeError(w, http.StatusBadRequest, runnerapi.CodeInvalidCSR, "csr: not signed by public_key")
		return
	}
	if err := runnerapi.CheckCapacity(req.Capacity); err != nil {
		writeError(w, http.StatusBadRequest, runnerapi.CodeBadRequest, "capacity: "+err.Error())
		return
	}
	rep, err := fleet.Report(req.Capacity)
	if err != nil {
		s.internal(w, r, "enrol", err)
		return
	}
	digest, ok := tokens.Enrolment.Digest(req.Token)
	if !ok {
		// Same answer as for an unknown, used or expired token.
		writeError(w, http.StatusForbidden, runnerapi.CodeTokenRefused, "enrolment token refused")
		return
	}
	fp := pki.KeyFingerprint(pub)
	runner, err := s.o.Store.Enrol(r.Context(), store.NewRunner{
		TokenDigest: digest, Name: req.Name, PublicKey: pub, Fingerprint: fp, CSR: csr.Raw, Capacity: rep,
	})
	switch {
	case errors.Is(err, store.ErrTokenRefused):
		writeError(w, http.StatusForbidden, runnerapi.CodeTokenRefused, "enrolment token refused")
		return
	case errors.Is(err, record.ErrConflict):
		writeError(w, http.StatusConflict, runnerapi.CodeConflict, "a runner with this key, or a live runner with this name, already exists in the pool")
		return
	case err != nil:
		s.internal(w, r, "enrol", err)
		return
	}
	s.o.Log.InfoContext(r.Context(), "runner enrolled", "runner_id", runner.ID, "name", runner.Name,
		"pool_id", runner.PoolID, "fingerprint", fp, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusCreated, runnerapi.EnrolResponse{RunnerID: runner.ID.String(), Fingerprint: fp, Status: string(runner.Status)})
}

// clockSkew bounds how far a wait request's timestamp may be from ours.
const clockSkew = 5 * time.Minute

// wait long-polls until an administrator decides, or wait_seconds pass.
// The request is signed with the runner's key; an unknown runner and a bad
// signature get the same answer.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.WaitRequest
	if !decode(w, r, &req) {
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusUnauthorized, runnerapi.CodeUnauthenticated, "request not signed by an enrolled runner")
		return
	}
	ctx := r.Context()
	// Subscribe before the first read: a decision between the two would
	// otherwise be missed.
	sub := s.o.Listener.Subscribe(store.ChannelRunnerStatus)
	defer sub.Close()

	runner, err := s.o.Store.Runner(ctx, record.AllOrganisations(), id)
	if errors.Is(err, record.ErrNotFound) || err == nil && !signedBy(runner, id, req) {
		writeError(w, http.StatusUnauthorized, runnerapi.CodeUnauthenticated, "request not signed by an enrolled runner")
		return
	}
	if err != nil {
		s.internal(w, r, "wait: load runner", err)
		return
	}
	wait := time.Duration(min(max(req.WaitSeconds, 0), runnerapi.MaxWaitSeconds)) * time.Second
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for runner.Status == record.RunnerPending {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			writeJSON(w, http.StatusOK, runnerapi.WaitResponse{Status: runnerapi.StatusPending})
			return
		case p := <-sub.C:
			if p != "" && p != id.String() {
				continue
			}
		}
		if runner, err = s.o.Store.Runner(ctx, record.AllOrganisations(), id); err != nil {
			s.internal(w, r, "wait: reload runner", err)
			return
		}
	}
	resp := runnerapi.WaitResponse{Status: string(runner.Status), Reason: runner.StatusReason}
	if runner.Status == record.RunnerApproved {
		chain, err := s.o.Enrolment.CurrentChain(ctx, runner)
		if err != nil {
			s.internal(w, r, "wait: certificate", err)
			return
		}
		resp.CertificateChain = string(pki.EncodeCertificates(chain...))
	}
	writeJSON(w, http.StatusOK, resp)
}

func signedBy(runner record.Runner, id uuid.UUID, req runnerapi.WaitRequest) bool {
	if d := time.Since(req.Timestamp); d > clockSkew || d < -clockSkew {
		return false
	}
	return ed25519.Verify(runner.PublicKey, runnerapi.WaitMessage(id.String(), req.Timestamp), req.Signature)
}

// internal answers a request the server could not serve: one the database
// could not serve now is 503 retry (nothing changed; send it again, as
// Retry-After says), anything else 500 internal.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, record.ErrUnavailable) {
		s.o.Log.WarnContext(r.Context(), op+": the database is unavailable", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, runnerapi.CodeRetry, "the database is unavailable; nothing changed: send the request again")
		return
	}
	s.o.Log.ErrorContext(r.Context(), op, "err", err)
	writeError(w, http.StatusInternalServerError, runnerapi.CodeInternal, "internal error")
}
