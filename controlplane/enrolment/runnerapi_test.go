package enrolment_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// A token enrols one runner, PENDING, under the fingerprint of its key;
// used, expired, revoked, unknown or malformed it is refused alike. A
// request refused for anything else leaves the token as it was.
func TestATokenEnrolsOneRunner(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	ctx := context.Background()
	tok := o.token(t)
	bad := newApplicant(t, tok, "not a name")
	_, err := o.svc.Enrol(ctx, bad.req, "192.0.2.1")
	refusedWith(t, err, runnerapi.CodeBadRequest)

	a := newApplicant(t, tok, "gpu-01")
	resp, err := o.svc.Enrol(ctx, a.req, "192.0.2.1")
	require.NoError(t, err, "the refused request did not use the token")
	fp := pki.KeyFingerprint(ed25519.PublicKey(a.req.PublicKey))
	require.Equal(t, runnerapi.EnrolResponse{RunnerID: resp.RunnerID, Fingerprint: fp, Status: runnerapi.StatusPending}, resp)
	r, err := o.st.Runner(ctx, record.AllOrganisations(), uuid.MustParse(resp.RunnerID))
	require.NoError(t, err)
	require.Equal(t, o.pool.ID, r.PoolID)
	require.Equal(t, "gpu-01", r.Name)
	require.Equal(t, fp, r.Fingerprint)

	again := newApplicant(t, tok, "gpu-02")
	_, err = o.svc.Enrol(ctx, again.req, "192.0.2.1")
	refusedWith(t, err, runnerapi.CodeTokenRefused)

	expired, digest := tokens.Enrolment.New()
	_, err = o.st.CreateEnrolmentToken(ctx, record.AllOrganisations(), o.pool.ID, digest, nil, time.Now().Add(-time.Second))
	require.NoError(t, err)
	revoked, made, err := o.svc.CreateToken(ctx, record.AllOrganisations(), o.pool.ID, time.Hour, nil)
	require.NoError(t, err)
	_, err = o.svc.RevokeToken(ctx, record.AllOrganisations(), made.ID, nil)
	require.NoError(t, err)
	unknown, _ := tokens.Enrolment.New()
	for name, tok := range map[string]string{"expired": expired, "revoked": revoked, "unknown": unknown, "malformed": "rmet_short"} {
		_, err := o.svc.Enrol(ctx, newApplicant(t, tok, "gpu-03").req, "192.0.2.1")
		refusedWith(t, err, runnerapi.CodeTokenRefused)
		require.Equal(t, "enrolment token refused", err.(*runnerapi.ErrorBody).Message, name)
	}

	same := a
	same.req.Token, same.req.Name = o.token(t), "gpu-04"
	_, err = o.svc.Enrol(ctx, same.req, "192.0.2.1")
	refusedWith(t, err, runnerapi.CodeConflict)
}

// An enrolment that could not be a runner's is refused, each with its
// code: a bad name, a key that is not Ed25519, a CSR that does not parse,
// asks for extensions or is not signed by the key, a capacity no agent
// reports.
func TestAnEnrolmentIsChecked(t *testing.T) {
	t.Parallel()
	svc := enrolment.New(enrolment.Options{}) // refused before the store
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	csrOf := func(key any, tmpl *x509.CertificateRequest) string {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		require.NoError(t, err)
		return string(pki.EncodeCSR(der))
	}
	for _, c := range []struct {
		name string
		f    func(*applicant)
		code string
	}{
		{"an empty name", func(a *applicant) { a.req.Name = "" }, runnerapi.CodeBadRequest},
		{"a name starting with a dash", func(a *applicant) { a.req.Name = "-gpu" }, runnerapi.CodeBadRequest},
		{"a name of 64", func(a *applicant) { a.req.Name = strings.Repeat("g", 64) }, runnerapi.CodeBadRequest},
		{"a short key", func(a *applicant) { a.req.PublicKey = a.req.PublicKey[:31] }, runnerapi.CodeInvalidKey},
		{"a CSR that is not PEM", func(a *applicant) { a.req.CSR = "junk" }, runnerapi.CodeInvalidCSR},
		{"a CSR asking for a name", func(a *applicant) {
			a.req.CSR = csrOf(a.priv, &x509.CertificateRequest{DNSNames: []string{"runmesh.example.com"}})
		}, runnerapi.CodeInvalidCSR},
		{"a CSR of another key", func(a *applicant) {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			a.req.CSR = csrOf(other, &x509.CertificateRequest{})
		}, runnerapi.CodeInvalidCSR},
		{"a CSR of an ECDSA key", func(a *applicant) { a.req.CSR = csrOf(ecKey, &x509.CertificateRequest{}) }, runnerapi.CodeInvalidCSR},
		{"an impossible capacity", func(a *applicant) { a.req.Capacity.Host.Cores = -1 }, runnerapi.CodeBadRequest},
		{"a malformed token", func(a *applicant) { a.req.Token = "junk" }, runnerapi.CodeTokenRefused},
	} {
		a := newApplicant(t, "rmet_x", "gpu-01")
		c.f(&a)
		_, err := svc.Enrol(context.Background(), a.req, "192.0.2.1")
		refusedWith(t, err, c.code)
	}

	o := newOffice(t, 0)
	a := newApplicant(t, o.token(t), strings.Repeat("g", 63))
	_, err = o.svc.Enrol(context.Background(), a.req, "192.0.2.1")
	require.NoError(t, err, "a name of 63")
}

// An enrolment token lives a minute to seven days.
func TestATokensLife(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	for _, c := range []struct {
		ttl time.Duration
		ok  bool
	}{{time.Minute - time.Second, false}, {time.Minute, true}, {7 * 24 * time.Hour, true}, {7*24*time.Hour + time.Second, false}} {
		start := time.Now()
		tok, made, err := o.svc.CreateToken(context.Background(), record.AllOrganisations(), o.pool.ID, c.ttl, nil)
		if !c.ok {
			var ie *record.InputError
			require.ErrorAs(t, err, &ie, "%s", c.ttl)
			require.Equal(t, "ttlSeconds: between 60 and 604800", ie.Msg)
			continue
		}
		require.NoError(t, err, "%s", c.ttl)
		require.True(t, strings.HasPrefix(tok, tokens.Enrolment.Prefix))
		require.WithinRange(t, made.ExpiresAt, start.Add(c.ttl).Add(-time.Second), time.Now().Add(c.ttl))
	}
}

// Waiting for the decision needs the runner's signature, made within five
// minutes of the server's clock; a request that is not signed so is
// refused the same way as one for a runner that does not exist.
func TestAWaitIsSignedByTheRunner(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	ctx := context.Background()
	id, a := o.enrolled(t, "gpu-01")
	now := time.Now()
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, c := range map[string]struct {
		id  string
		key ed25519.PrivateKey
		ts  time.Time
	}{
		"not an id":            {"gpu-01", a.priv, now},
		"no such runner":       {uuid.NewString(), a.priv, now},
		"another key":          {id.String(), other, now},
		"six minutes ago":      {id.String(), a.priv, now.Add(-6 * time.Minute)},
		"six minutes from now": {id.String(), a.priv, now.Add(6 * time.Minute)},
	} {
		_, err := o.wait(ctx, c.id, c.key, c.ts, 0)
		refusedWith(t, err, runnerapi.CodeUnauthenticated)
		require.Equal(t, "request not signed by an enrolled runner", err.(*runnerapi.ErrorBody).Message, name)
	}
	for name, ts := range map[string]time.Time{"now": now, "four minutes ago": now.Add(-4 * time.Minute), "four from now": now.Add(4 * time.Minute)} {
		got, err := o.wait(ctx, id.String(), a.priv, ts, 0)
		require.NoError(t, err, name)
		require.Equal(t, runnerapi.WaitResponse{Status: runnerapi.StatusPending}, got, name)
	}
	got, err := o.wait(ctx, id.String(), a.priv, now, -3)
	require.NoError(t, err)
	require.Equal(t, runnerapi.StatusPending, got.Status, "a negative wait is none")
}

// A wait ends when the administrator decides on the runner: approved, with
// its certificate chain; rejected, with the reason. A decision on another
// runner does not end it, nor does the request's end make it an answer.
func TestAWaitEndsWithTheDecision(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	ctx := context.Background()
	id, a := o.enrolled(t, "gpu-01")
	otherID, other := o.enrolled(t, "gpu-02")
	type answer struct {
		resp runnerapi.WaitResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := o.wait(ctx, id.String(), a.priv, time.Now(), 30)
		answered <- answer{resp, err}
	}()
	// Another runner's decision wakes the wait, which reads its own
	// runner again and goes on waiting.
	_, err := o.svc.Reject(ctx, record.AllOrganisations(), otherID, "not ours", nil)
	require.NoError(t, err)
	select {
	case a := <-answered:
		t.Fatalf("the wait ended on another runner's decision: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	_, err = o.svc.Approve(ctx, record.AllOrganisations(), id, pki.KeyFingerprint(ed25519.PublicKey(a.req.PublicKey)), nil)
	require.NoError(t, err)
	select {
	case got := <-answered:
		require.NoError(t, got.err)
		require.Equal(t, runnerapi.StatusApproved, got.resp.Status)
		chain, err := pki.ParseCertificates([]byte(got.resp.CertificateChain))
		require.NoError(t, err)
		require.Len(t, chain, 2)
		runner, ok := pki.RunnerID(chain[0])
		require.True(t, ok)
		require.Equal(t, id.String(), runner)
		require.True(t, chain[1].Equal(o.auth.Keys().Intermediate))
	case <-time.After(10 * time.Second):
		t.Fatal("the approval did not end the wait")
	}

	got, err := o.wait(ctx, otherID.String(), other.priv, time.Now(), 30)
	require.NoError(t, err)
	require.Equal(t, runnerapi.WaitResponse{Status: runnerapi.StatusRejected, Reason: "not ours"}, got)

	pending, p := o.enrolled(t, "gpu-03")
	cause := errors.New("the connection dropped")
	gone, cancel := context.WithTimeoutCause(ctx, 500*time.Millisecond, cause)
	defer cancel()
	_, err = o.wait(gone, pending.String(), p.priv, time.Now(), 30)
	require.ErrorIs(t, err, cause, "the request ended while it waited")
}

// A runner's certificate is recognised while it is ours, valid now, names
// a runner, and that runner is approved; every other one is refused as
// not authenticated, and the handshake's check refuses what is revoked or
// unknown.
func TestACertificateIsRecognised(t *testing.T) {
	t.Parallel()
	o := newOffice(t, 0)
	ctx := context.Background()
	r, leaf := o.approved(t, "gpu-01")
	now := time.Now()
	who, err := o.svc.Authenticate(ctx, leaf, now)
	require.NoError(t, err)
	require.Equal(t, r.ID, who.Runner.ID)
	require.Equal(t, leaf.SerialNumber.String(), who.Serial)
	require.Equal(t, leaf.NotAfter, who.NotAfter)
	require.NoError(t, o.svc.CheckPeer(ctx, leaf))

	server, err := o.auth.IssueServer(ctx, []string{"runmesh.example.com"}, time.Hour)
	require.NoError(t, err)
	forged := func(serial *big.Int, uri string) *x509.Certificate {
		u, err := url.Parse(uri)
		require.NoError(t, err)
		return &x509.Certificate{SerialNumber: serial, URIs: []*url.URL{u}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			Subject: pkix.Name{CommonName: "x"}}
	}
	for _, c := range []struct {
		name string
		leaf *x509.Certificate
		at   time.Time
		msg  string
	}{
		{"none", nil, now, "a runner client certificate is required"},
		{"expired", leaf, leaf.NotAfter.Add(time.Second), "the client certificate is not valid now"},
		{"not yet valid", leaf, leaf.NotBefore.Add(-time.Second), "the client certificate is not valid now"},
		{"a server's", server.Leaf, now, "not a runner certificate"},
		{"naming no runner id", forged(leaf.SerialNumber, "urn:runmesh:runner:gpu-01"), now, "not a runner certificate"},
		{"not ours", forged(big.NewInt(42), pki.RunnerURI(r.ID.String()).String()), now, "certificate revoked, or its runner is not approved"},
		{"a known serial naming another runner", forged(server.Leaf.SerialNumber, pki.RunnerURI(uuid.NewString()).String()), now, "unknown runner"},
	} {
		_, err := o.svc.Authenticate(ctx, c.leaf, c.at)
		refusedWith(t, err, runnerapi.CodeUnauthenticated)
		require.Equal(t, c.msg, err.(*runnerapi.ErrorBody).Message, c.name)
	}
	_, err = o.svc.Authenticate(ctx, leaf, leaf.NotAfter)
	require.NoError(t, err, "valid to its last instant")
	require.NoError(t, o.svc.CheckPeer(ctx, server.Leaf), "a server certificate of ours")
	require.EqualError(t, o.svc.CheckPeer(ctx, forged(big.NewInt(42), pki.RunnerURI(r.ID.String()).String())), "client certificate revoked or unknown")

	// Revoked: refused once the change is heard (Watch).
	_, err = o.svc.Revoke(ctx, record.AllOrganisations(), r.ID, "stolen", nil)
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, func() bool {
		_, err := o.svc.Authenticate(ctx, leaf, time.Now())
		return err != nil
	}, "the revocation heard")
	_, err = o.svc.Authenticate(ctx, leaf, time.Now())
	refusedWith(t, err, runnerapi.CodeUnauthenticated)
	require.Equal(t, "certificate revoked, or its runner is not approved", err.(*runnerapi.ErrorBody).Message)
	require.EqualError(t, o.svc.CheckPeer(ctx, leaf), "client certificate revoked or unknown")
}

// An approved runner coming back gets its newest certificate while that
// is before two thirds of its life, and a fresh one after, or when it has
// none; a runner not approved gets none.
func TestARunnerGetsAFreshCertificateAfterTwoThirds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOffice(t, time.Hour)
	r, leaf := o.approved(t, "gpu-01")
	again, err := o.svc.CurrentChain(ctx, r)
	require.NoError(t, err)
	require.True(t, leaf.Equal(again[0]), "before two thirds of an hour")
	require.True(t, again[1].Equal(o.auth.Keys().Intermediate))

	short := newOffice(t, time.Second)
	r, leaf = short.approved(t, "gpu-02")
	var fresh []*x509.Certificate
	deadline := time.Now().Add(10 * time.Second)
	for fresh == nil || fresh[0].Equal(leaf) {
		require.True(t, time.Now().Before(deadline), "no fresh certificate after two thirds of a second")
		fresh, err = short.svc.CurrentChain(ctx, r)
		require.NoError(t, err)
	}
	require.NotEqual(t, leaf.SerialNumber, fresh[0].SerialNumber)

	id, _ := o.enrolled(t, "gpu-03")
	pending, err := o.st.Runner(ctx, record.AllOrganisations(), id)
	require.NoError(t, err)
	_, err = o.svc.CurrentChain(ctx, pending)
	var wrong *enrolment.WrongStatusError
	require.ErrorAs(t, err, &wrong)
	require.Equal(t, record.RunnerPending, wrong.Status)

	// Approved without a certificate (as a store test would): one is issued.
	require.NoError(t, o.st.WithTx(ctx, func(tx *store.Tx) error {
		if _, err := tx.LockRunner(ctx, record.AllOrganisations(), id); err != nil {
			return err
		}
		return tx.SetRunnerStatus(ctx, id, store.RunnerDecision{Status: record.RunnerApproved}, nil)
	}))
	approved, err := o.st.Runner(ctx, record.AllOrganisations(), id)
	require.NoError(t, err)
	chain, err := o.svc.CurrentChain(ctx, approved)
	require.NoError(t, err)
	who, ok := pki.RunnerID(chain[0])
	require.True(t, ok)
	require.Equal(t, id.String(), who)
}
