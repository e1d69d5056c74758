package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/smallstep/certificates/db"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/pki/ca"
)

// runnerLeaf is a runner certificate a issued, valid now.
func runnerLeaf(t *testing.T, a *ca.Authority) *x509.Certificate {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	require.NoError(t, err)
	csr, err := x509.ParseCertificateRequest(der)
	require.NoError(t, err)
	chain, err := a.IssueRunner(context.Background(), csr, "6f1c3d2e-0000-4000-8000-000000000005", time.Hour)
	require.NoError(t, err)
	return chain[0]
}

// openDB revokes nothing and knows of no certificate: enough for step-ca
// to get as far as renewing and revoking.
type openDB struct{ memDB }

func (openDB) IsRevoked(string) (bool, error)                   { return false, nil }
func (openDB) Revoke(*db.RevokedCertificateInfo) error          { return nil }
func (openDB) GetCertificate(string) (*x509.Certificate, error) { return nil, nil }

func authority(t *testing.T) *ca.Authority {
	t.Helper()
	keys, _, err := ca.Init(t.TempDir(), "test")
	require.NoError(t, err)
	a, err := ca.NewAuthority(keys, openDB{})
	require.NoError(t, err)
	return a
}

// stepAnswer is a step-ca route's answer: its status, and the message of a
// step-ca error ("" for any other body).
func stepAnswer(t *testing.T, h http.Handler, r *http.Request) (int, string, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var e struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	}
	if json.Unmarshal(w.Body.Bytes(), &e) == nil && e.Status == w.Code {
		return w.Code, e.Message, w.Header()
	}
	return w.Code, "", w.Header()
}

// A revocation is refused before step-ca reads it when its body is past
// the bound (said, or grown while read), is not JSON, names a serial no
// certificate can have, or names no caller: neither a client certificate
// nor a token.
func TestARevocationIsCheckedFirst(t *testing.T) {
	t.Parallel()
	a := authority(t)
	h := a.StepHandler("1.4.0")
	revoke := func(body string) *http.Request {
		return httptest.NewRequest(http.MethodPost, "/revoke", strings.NewReader(body))
	}
	serial := func(s string) string { return `{"serial": "` + s + `"}` }
	for _, c := range []struct {
		name   string
		r      *http.Request
		status int
		msg    string
	}{
		{"over the bound", revoke(strings.Repeat(" ", ca.MaxStepBodyBytes+1)), http.StatusRequestEntityTooLarge, "request body over 65536 bytes"},
		{"at the bound, not JSON", revoke(strings.Repeat(" ", ca.MaxStepBodyBytes)), http.StatusBadRequest, "malformed revocation request"},
		{"not JSON", revoke("{"), http.StatusBadRequest, "malformed revocation request"},
		{"no serial", revoke(`{}`), http.StatusBadRequest, "serial: 1 to 64 digits"},
		{"letters without 0x", revoke(serial("12ab")), http.StatusBadRequest, "serial: 1 to 64 digits"},
		{"0x alone", revoke(serial("0x")), http.StatusBadRequest, "serial: 1 to 64 digits"},
		{"not hex after 0x", revoke(serial("0x1g")), http.StatusBadRequest, "serial: 1 to 64 digits"},
		{"65 digits", revoke(serial(strings.Repeat("1", 65))), http.StatusBadRequest, "serial: 1 to 64 digits"},
		{"64 digits, no caller", revoke(serial(strings.Repeat("1", 64))), http.StatusUnauthorized, "revocation needs a client certificate or a token"},
		{"hex, no caller", revoke(serial("0X00fa")), http.StatusUnauthorized, "revocation needs a client certificate or a token"},
		{"digits, no caller", revoke(serial("0123456789")), http.StatusUnauthorized, "revocation needs a client certificate or a token"},
	} {
		status, msg, _ := stepAnswer(t, h, c.r)
		require.Equal(t, c.status, status, c.name)
		require.Equal(t, c.msg, msg, c.name)
	}

	// Sent in chunks, its length unsaid: cut when it grows past the bound.
	r := revoke("")
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(strings.Repeat(" ", ca.MaxStepBodyBytes+1))), -1
	status, msg, _ := stepAnswer(t, h, r)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, "request body over 65536 bytes", msg)

	// A token or a client certificate names a caller: step-ca decides.
	withToken, withCert := revoke(`{"serial": "1", "ott": "x"}`), revoke(serial("1"))
	withCert.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{runnerLeaf(t, a)}}
	for name, r := range map[string]*http.Request{"a token": withToken, "a client certificate": withCert} {
		status, msg, _ := stepAnswer(t, h, r)
		require.NotEqual(t, "revocation needs a client certificate or a token", msg, name)
		require.NotEqual(t, http.StatusBadRequest, status, name)
	}
}

// /renew closes its connection and refuses a client certificate that is
// not valid now, expired or not yet valid, before step-ca sees it.
func TestARenewalChecksTheCertificateNow(t *testing.T) {
	t.Parallel()
	a := authority(t)
	h := a.StepHandler("1.4.0")
	renew := func(notBefore, notAfter time.Time) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/renew", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{NotBefore: notBefore, NotAfter: notAfter}}}
		return r
	}
	now := time.Now()
	for name, r := range map[string]*http.Request{
		"expired":       renew(now.Add(-2*time.Hour), now.Add(-time.Minute)),
		"not yet valid": renew(now.Add(time.Minute), now.Add(time.Hour)),
	} {
		status, msg, header := stepAnswer(t, h, r)
		require.Equal(t, http.StatusUnauthorized, status, name)
		require.Equal(t, "the client certificate is not valid now", msg, name)
		require.Equal(t, "close", header.Get("Connection"), name)
	}
	for name, r := range map[string]*http.Request{
		"valid now":       renew(now.Add(-time.Minute), now.Add(time.Hour)),
		"no certificate":  httptest.NewRequest(http.MethodPost, "/renew", nil),
		"TLS without one": func() *http.Request { r := renew(now, now); r.TLS.PeerCertificates = nil; return r }(),
	} {
		_, msg, header := stepAnswer(t, h, r)
		require.NotEqual(t, "the client certificate is not valid now", msg, name)
		require.Equal(t, "close", header.Get("Connection"), name)
	}
}

// /version says the server's version; other routes answer in step-ca's
// error format.
func TestStepRoutes(t *testing.T) {
	t.Parallel()
	h := authority(t).StepHandler("1.4.0")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/version", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.JSONEq(t, `{"version": "1.4.0", "requireClientAuthentication": false}`, w.Body.String())
	status, msg, _ := stepAnswer(t, h, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not found", msg)
	status, msg, _ = stepAnswer(t, h, httptest.NewRequest(http.MethodDelete, "/version", nil))
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "method not allowed", msg)
}

// A server certificate names each DNS name and IP address given, the first
// as its subject, for server authentication; its chain runs to the
// intermediate.
func TestAServerCertificate(t *testing.T) {
	t.Parallel()
	a := authority(t)
	c, err := a.IssueServer(context.Background(), []string{"runmesh.example.com", "10.0.0.7", "runmesh"}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, "runmesh.example.com", c.Leaf.Subject.CommonName)
	require.Equal(t, []string{"runmesh.example.com", "runmesh"}, c.Leaf.DNSNames)
	require.Len(t, c.Leaf.IPAddresses, 1)
	require.True(t, c.Leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")))
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, c.Leaf.ExtKeyUsage)
	require.Len(t, c.Certificate, 2)
	require.Equal(t, c.Leaf.Raw, c.Certificate[0])
	require.Equal(t, a.Keys().Intermediate.Raw, c.Certificate[1])
	_, err = c.Leaf.Verify(x509.VerifyOptions{Roots: a.Roots(), Intermediates: func() *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(a.Keys().Intermediate)
		return p
	}(), DNSName: "runmesh"})
	require.NoError(t, err)
}

// A runner's key is Ed25519: a CSR with another key is refused.
func TestARunnerKeyIsEd25519(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "r"}}, key)
	require.NoError(t, err)
	csr, err := x509.ParseCertificateRequest(der)
	require.NoError(t, err)
	_, err = authority(t).IssueRunner(context.Background(), csr, "6f1c3d2e-0000-4000-8000-000000000004", time.Hour)
	require.EqualError(t, err, "runner keys must be Ed25519")
}
