package enrolment

import (
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
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

// What a runner itself asks of enrolment, over the runner API: to enrol,
// to learn the administrator's decision, and, with every later request,
// to be recognised by its certificate. A refusal is a
// *runnerapi.ErrorBody with the code the runner reads.

var runnerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// errTokenRefused is the one answer for a token that is malformed,
// unknown, used or expired: which of them is not for the caller to learn.
var errTokenRefused = runnerapi.Refuse(runnerapi.CodeTokenRefused, "enrolment token refused")

// Enrol creates a PENDING runner. Everything is checked before the token
// is touched, and the token is consumed in the same transaction that
// creates the runner, so a refused request changes nothing. remote is
// where the request came from, for the log.
func (s *Service) Enrol(ctx context.Context, req runnerapi.EnrolRequest, remote string) (runnerapi.EnrolResponse, error) {
	pub, csr, err := checkEnrolment(req)
	if err != nil {
		return runnerapi.EnrolResponse{}, err
	}
	rep, err := fleet.Report(req.Capacity)
	if err != nil {
		return runnerapi.EnrolResponse{}, err
	}
	digest, ok := tokens.Enrolment.Digest(req.Token)
	if !ok {
		return runnerapi.EnrolResponse{}, errTokenRefused
	}
	fp := pki.KeyFingerprint(pub)
	runner, err := s.st.Enrol(ctx, store.NewRunner{
		TokenDigest: digest, Name: req.Name, PublicKey: pub, Fingerprint: fp, CSR: csr.Raw, Capacity: rep,
	})
	switch {
	case errors.Is(err, store.ErrTokenRefused):
		return runnerapi.EnrolResponse{}, errTokenRefused
	case errors.Is(err, record.ErrConflict):
		return runnerapi.EnrolResponse{}, runnerapi.Refuse(runnerapi.CodeConflict,
			"a runner with this key, or a live runner with this name, already exists in the pool")
	case err != nil:
		return runnerapi.EnrolResponse{}, err
	}
	s.log.InfoContext(ctx, "runner enrolled", "runner_id", runner.ID, "name", runner.Name,
		"pool_id", runner.PoolID, "fingerprint", fp, "remote", remote)
	return runnerapi.EnrolResponse{RunnerID: runner.ID.String(), Fingerprint: fp, Status: string(runner.Status)}, nil
}

// checkEnrolment refuses an enrolment that could not be a runner's: a bad
// name, a key that is not Ed25519, a CSR not signed by that key or asking
// for anything, a capacity no agent reports. It returns the key and the
// parsed CSR.
func checkEnrolment(req runnerapi.EnrolRequest) (ed25519.PublicKey, *x509.CertificateRequest, error) {
	if !runnerName.MatchString(req.Name) {
		return nil, nil, runnerapi.Refuse(runnerapi.CodeBadRequest, "name: 1 to 63 letters, digits, dots, dashes and underscores")
	}
	if len(req.PublicKey) != ed25519.PublicKeySize {
		return nil, nil, runnerapi.Refuse(runnerapi.CodeInvalidKey, "public_key: runner keys are Ed25519 (32 bytes)")
	}
	pub := ed25519.PublicKey(req.PublicKey)
	csr, err := pki.ParseCSR([]byte(req.CSR))
	if err != nil {
		return nil, nil, runnerapi.Refuse(runnerapi.CodeInvalidCSR, "csr: %v", err)
	}
	if len(csr.Extensions) > 0 {
		// The CA ignores them anyway; a runner has no business asking.
		return nil, nil, runnerapi.Refuse(runnerapi.CodeInvalidCSR, "csr: a runner's certificate request carries no extensions (no names, no usages)")
	}
	csrKey, ok := csr.PublicKey.(ed25519.PublicKey)
	if !ok || subtle.ConstantTimeCompare(csrKey, pub) != 1 {
		return nil, nil, runnerapi.Refuse(runnerapi.CodeInvalidCSR, "csr: not signed by public_key")
	}
	if err := runnerapi.CheckCapacity(req.Capacity); err != nil {
		return nil, nil, runnerapi.Refuse(runnerapi.CodeBadRequest, "capacity: %v", err)
	}
	return pub, csr, nil
}

// clockSkew bounds how far a wait request's timestamp may be from ours.
const clockSkew = 5 * time.Minute

// errNotSigned is the one answer for an unknown runner and a bad
// signature alike.
var errNotSigned = runnerapi.Refuse(runnerapi.CodeUnauthenticated, "request not signed by an enrolled runner")

// Wait long-polls until an administrator decides on the enrolled runner
// id, or wait_seconds pass (the answer is then PENDING). The request is
// signed with the runner's key. An approved runner gets its current
// certificate chain.
func (s *Service) Wait(ctx context.Context, id string, req runnerapi.WaitRequest) (runnerapi.WaitResponse, error) {
	runnerID, err := uuid.Parse(id)
	if err != nil {
		return runnerapi.WaitResponse{}, errNotSigned
	}
	// Subscribe before the first read: a decision between the two would
	// otherwise be missed.
	sub := s.listener.Subscribe(store.ChannelRunnerStatus)
	defer sub.Close()

	runner, err := s.st.Runner(ctx, record.AllOrganisations(), runnerID)
	if errors.Is(err, record.ErrNotFound) || err == nil && !signedBy(runner, runnerID, req, time.Now()) {
		return runnerapi.WaitResponse{}, errNotSigned
	}
	if err != nil {
		return runnerapi.WaitResponse{}, err
	}
	wait := time.Duration(min(max(req.WaitSeconds, 0), runnerapi.MaxWaitSeconds)) * time.Second
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for runner.Status == record.RunnerPending {
		select {
		case <-ctx.Done():
			return runnerapi.WaitResponse{}, context.Cause(ctx)
		case <-deadline.C:
			return runnerapi.WaitResponse{Status: runnerapi.StatusPending}, nil
		case p := <-sub.C:
			if p != "" && p != id {
				continue
			}
		}
		if runner, err = s.st.Runner(ctx, record.AllOrganisations(), runnerID); err != nil {
			return runnerapi.WaitResponse{}, err
		}
	}
	resp := runnerapi.WaitResponse{Status: string(runner.Status), Reason: runner.StatusReason}
	if runner.Status == record.RunnerApproved {
		chain, err := s.CurrentChain(ctx, runner)
		if err != nil {
			return runnerapi.WaitResponse{}, err
		}
		resp.CertificateChain = string(pki.EncodeCertificates(chain...))
	}
	return resp, nil
}

// signedBy: the wait request is signed by the runner's key, at a time
// within clockSkew of now.
func signedBy(runner record.Runner, id uuid.UUID, req runnerapi.WaitRequest, now time.Time) bool {
	if d := now.Sub(req.Timestamp); d > clockSkew || d < -clockSkew {
		return false
	}
	return ed25519.Verify(runner.PublicKey, runnerapi.WaitMessage(id.String(), req.Timestamp), req.Signature)
}

// A Caller is an authenticated runner and the certificate it presented.
type Caller struct {
	Runner   record.Runner // with its inventory, as recently read
	Serial   string
	NotAfter time.Time
}

// Authenticate recognises the runner whose client certificate leaf is,
// at now: a certificate of ours, valid now, naming a runner that is
// approved and not revoked. It is asked on every request, not only at the
// handshake: a connection opened before a revocation, or kept alive past
// its certificate's expiry, must not keep working. The answer comes from
// a cache that every runner change and revocation empties of what it
// names (see Watch), so that thousands of heartbeats a second cost no
// query each.
func (s *Service) Authenticate(ctx context.Context, leaf *x509.Certificate, now time.Time) (Caller, error) {
	deny := func(msg string) (Caller, error) {
		return Caller{}, runnerapi.Refuse(runnerapi.CodeUnauthenticated, "%s", msg)
	}
	if leaf == nil {
		return deny("a runner client certificate is required")
	}
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return deny("the client certificate is not valid now")
	}
	idStr, ok := pki.RunnerID(leaf)
	id, err := uuid.Parse(idStr)
	if !ok || err != nil {
		return deny("not a runner certificate")
	}
	serial := leaf.SerialNumber.String()
	who, err := s.ids.lookup(ctx, serial, id)
	if errors.Is(err, record.ErrNotFound) {
		return deny("unknown runner")
	}
	if err != nil {
		return Caller{}, err
	}
	if !who.standing.Usable() {
		return deny("certificate revoked, or its runner is not approved")
	}
	return Caller{Runner: who.runner, Serial: serial, NotAfter: leaf.NotAfter}, nil
}

// AuthenticateReplica recognises another server replica by the client
// certificate it presents to relay a session (pki.ReplicaID): one of
// ours, valid now and not revoked. A runner's certificate is refused
// here, as a replica's is by Authenticate.
func (s *Service) AuthenticateReplica(ctx context.Context, leaf *x509.Certificate, now time.Time) (uuid.UUID, error) {
	deny := func(msg string) (uuid.UUID, error) {
		return uuid.Nil, runnerapi.Refuse(runnerapi.CodeUnauthenticated, "%s", msg)
	}
	if leaf == nil {
		return deny("a replica client certificate is required")
	}
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return deny("the client certificate is not valid now")
	}
	idStr, ok := pki.ReplicaID(leaf)
	id, err := uuid.Parse(idStr)
	if !ok || err != nil {
		return deny("not a replica certificate")
	}
	who, err := s.ids.lookup(ctx, leaf.SerialNumber.String(), uuid.Nil)
	if err != nil {
		return uuid.Nil, err
	}
	if !who.standing.Usable() || who.standing.RunnerID != nil {
		return deny("certificate revoked or unknown")
	}
	return id, nil
}

// CheckPeer is the handshake's check of a client certificate that chains
// to our root: refused when it is revoked, unknown, or its runner is not
// approved. (A certificate is optional at the handshake: enrolment and the
// bootstrap routes come before a runner has one.)
func (s *Service) CheckPeer(ctx context.Context, leaf *x509.Certificate) error {
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
}

// Watch keeps Authenticate's cache honest until ctx ends: every runner
// change and revocation, from any replica, drops what it names.
func (s *Service) Watch(ctx context.Context) { s.ids.watch(ctx, s.listener) }

// Heard drops what a runner change names (see store.OnRunnerChange): call
// it when this replica has just changed a runner or revoked a
// certificate, so that its next request does not wait for the
// notification.
func (s *Service) Heard(channel, payload string) { s.ids.heard(channel, payload) }

// Root is the CA's root, which every runner certificate chains to.
func (s *Service) Root() *x509.Certificate { return s.authority.Keys().Root }

// StepHandler serves step-ca's own routes (bootstrap, renewal and
// revocation) for the authority; renewal is refused to a runner that
// is revoked or not approved (the authority's AuthDB asks the store).
// version is what /version tells.
func (s *Service) StepHandler(version string) http.Handler { return s.authority.StepHandler(version) }
