package enrolment_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/controlplane/enrolment/castore"
	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/internal/store/storetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// office is enrolment over the shared database, its listener running and
// its cache watched, with a pool of an organisation of its own.
type office struct {
	st   *store.Store
	svc  *enrolment.Service
	auth *ca.Authority
	l    *store.Listener
	pool record.Pool
}

func newOffice(t *testing.T, lifetime time.Duration) *office {
	t.Helper()
	ctx := context.Background()
	db := storetest.SharedPool(t)
	st := store.New(db)
	l := store.NewListener(db, slog.New(slog.DiscardHandler))
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start listening")
	}
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	auth, err := ca.NewAuthority(keys, castore.New(st))
	require.NoError(t, err)
	o := &office{st: st, auth: auth, l: l, svc: enrolment.New(enrolment.Options{Store: st, Listener: l, Authority: auth, CertLifetime: lifetime})}
	go o.svc.Watch(lctx)
	org, err := st.CreateOrganisation(ctx, "org-"+uuid.NewString()[:8])
	require.NoError(t, err)
	o.pool, err = st.CreatePool(ctx, record.NewPool{OrganisationID: &org.ID, Name: "gpu"})
	require.NoError(t, err)
	return o
}

// token is a fresh enrolment token for the office's pool.
func (o *office) token(t *testing.T) string {
	t.Helper()
	tok, _, err := o.svc.CreateToken(context.Background(), record.AllOrganisations(), o.pool.ID, time.Hour, nil)
	require.NoError(t, err)
	return tok
}

// applicant is a runner's key and the request it enrols with.
type applicant struct {
	priv ed25519.PrivateKey
	req  runnerapi.EnrolRequest
}

func newApplicant(t *testing.T, token, name string) applicant {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	require.NoError(t, err)
	return applicant{priv: priv, req: runnerapi.EnrolRequest{Token: token, Name: name, PublicKey: pub, CSR: string(pki.EncodeCSR(der)),
		Capacity: runnerapi.Capacity{Host: runnerapi.HostCapacity{Cores: 4, MemoryMiB: 4096}}}}
}

// enrolled enrols a runner named name and returns its id and key.
func (o *office) enrolled(t *testing.T, name string) (uuid.UUID, applicant) {
	t.Helper()
	a := newApplicant(t, o.token(t), name)
	resp, err := o.svc.Enrol(context.Background(), a.req, "192.0.2.1")
	require.NoError(t, err)
	return uuid.MustParse(resp.RunnerID), a
}

// approved enrols and approves a runner, and returns it with the leaf of
// its first certificate.
func (o *office) approved(t *testing.T, name string) (record.Runner, *x509.Certificate) {
	t.Helper()
	id, a := o.enrolled(t, name)
	r, err := o.svc.Approve(context.Background(), record.AllOrganisations(), id, pki.KeyFingerprint(ed25519.PublicKey(a.req.PublicKey)), nil)
	require.NoError(t, err)
	chain, err := o.svc.CurrentChain(context.Background(), r)
	require.NoError(t, err)
	return r, chain[0]
}

// wait asks for the runner's decision as the holder of key would, its
// request made at ts.
func (o *office) wait(ctx context.Context, id string, key ed25519.PrivateKey, ts time.Time, seconds int) (runnerapi.WaitResponse, error) {
	return o.svc.Wait(ctx, id, runnerapi.WaitRequest{Timestamp: ts, WaitSeconds: seconds,
		Signature: ed25519.Sign(key, runnerapi.WaitMessage(id, ts))})
}

// refusedWith requires err to be the runner API's refusal with code.
func refusedWith(t *testing.T, err error, code string) {
	t.Helper()
	var body *runnerapi.ErrorBody
	require.True(t, errors.As(err, &body), "%v is not a refusal", err)
	require.Equal(t, code, body.Code, body.Message)
}
