package ca_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/smallstep/certificates/db"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/pki/ca"
)

// memDB records nothing: enough for issuing.
type memDB struct{ db.AuthDB }

func (memDB) StoreCertificateChain(...*x509.Certificate) error                      { return nil }
func (memDB) StoreRenewedCertificate(*x509.Certificate, ...*x509.Certificate) error { return nil }

// A CSR may ask for anything; the runner certificate names the runner and
// allows client authentication, nothing else.
func TestRunnerCertificatesIgnoreWhatTheCSRAsks(t *testing.T) {
	t.Parallel()
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	a, err := ca.NewAuthority(keys, memDB{})
	require.NoError(t, err)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	victim, _ := url.Parse("urn:runmesh:runner:00000000-0000-4000-8000-000000000001")
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 1}}) // serverAuth
	bc, _ := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "runmesh.example.com"},
		DNSNames:    []string{"runmesh.example.com"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		URIs:        []*url.URL{victim},
		ExtraExtensions: []pkix.Extension{
			{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Value: eku},
			{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc},
		},
	}, priv)
	require.NoError(t, err)
	csr, err := x509.ParseCertificateRequest(der)
	require.NoError(t, err)

	const me = "6f1c3d2e-0000-4000-8000-000000000002"
	chain, err := a.IssueRunner(context.Background(), csr, me, time.Hour)
	require.NoError(t, err)
	leaf := chain[0]
	require.Empty(t, leaf.DNSNames)
	require.Empty(t, leaf.IPAddresses)
	require.Equal(t, []*url.URL{pki.RunnerURI(me)}, leaf.URIs)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	require.False(t, leaf.IsCA)
	id, ok := pki.RunnerID(leaf)
	require.True(t, ok)
	require.Equal(t, me, id)
	// And it does not pass as a server certificate.
	roots := x509.NewCertPool()
	roots.AddCert(keys.Root)
	inter := x509.NewCertPool()
	inter.AddCert(keys.Intermediate)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err)
}

// A runner certificate is valid from Backdate before its issue (clocks a
// little behind still accept it) for its lifetime; the CA's root lasts 20
// years and its intermediate 10, both valid from a minute before creation.
func TestValidityPeriods(t *testing.T) {
	t.Parallel()
	before := time.Now()
	keys, created, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	require.True(t, created)
	after := time.Now()
	year := 365 * 24 * time.Hour
	for _, c := range []struct {
		cert  *x509.Certificate
		lasts time.Duration
	}{{keys.Root, 20 * year}, {keys.Intermediate, 10 * year}} {
		require.WithinRange(t, c.cert.NotBefore, before.Add(-time.Minute-time.Second), after.Add(-time.Minute))
		require.WithinDuration(t, c.cert.NotBefore.Add(c.lasts), c.cert.NotAfter, time.Second)
	}

	a, err := ca.NewAuthority(keys, memDB{})
	require.NoError(t, err)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	require.NoError(t, err)
	csr, err := x509.ParseCertificateRequest(der)
	require.NoError(t, err)
	issued := time.Now()
	chain, err := a.IssueRunner(context.Background(), csr, "6f1c3d2e-0000-4000-8000-000000000003", time.Hour)
	require.NoError(t, err)
	require.WithinDuration(t, issued.Add(-30*time.Second), chain[0].NotBefore, 2*time.Second, "backdated 30 s")
	require.WithinDuration(t, issued.Add(time.Hour), chain[0].NotAfter, 2*time.Second)
}

// A replica's certificate is a client certificate naming the replica, and
// nothing a runner's or a server's certificate is: Authenticate and
// AuthenticateReplica tell them apart by these URIs.
func TestReplicaCertificatesNameTheReplicaOnly(t *testing.T) {
	t.Parallel()
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	a, err := ca.NewAuthority(keys, memDB{})
	require.NoError(t, err)
	const id = "6f1c3d2e-0000-4000-8000-0000000000aa"
	cert, err := a.IssueReplica(context.Background(), id, time.Hour)
	require.NoError(t, err)
	leaf := cert.Leaf
	got, ok := pki.ReplicaID(leaf)
	require.True(t, ok)
	require.Equal(t, id, got)
	_, isRunner := pki.RunnerID(leaf)
	require.False(t, isRunner, "a replica is not a runner")
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	require.Empty(t, leaf.DNSNames)
	require.Empty(t, leaf.IPAddresses)
	roots := x509.NewCertPool()
	roots.AddCert(keys.Root)
	inter := x509.NewCertPool()
	inter.AddCert(keys.Intermediate)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "it chains to our root, for client authentication")

	server, err := a.IssueServer(context.Background(), []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	_, isReplica := pki.ReplicaID(server.Leaf)
	require.False(t, isReplica, "a listener's certificate names no replica")
}
