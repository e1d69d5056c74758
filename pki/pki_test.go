package pki_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/pki"
)

func TestKeyFingerprintFormat(t *testing.T) {
	t.Parallel()
	// A fixed key, so the string is checked, not just recomputed.
	pub := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	fp := pki.KeyFingerprint(pub)
	require.Equal(t, "SHA256:", fp[:7])
	require.Len(t, fp, 7+44, "padded base64 of 32 bytes")
	require.Equal(t, fp[len(fp)-8:], pki.FingerprintHint(fp))
}

func TestRunnerURIRoundTrip(t *testing.T) {
	t.Parallel()
	const id = "6f1c3d2e-0000-4000-8000-000000000001"
	got, ok := pki.RunnerID(&x509.Certificate{URIs: []*url.URL{pki.RunnerURI(id)}})
	require.True(t, ok)
	require.Equal(t, id, got)
	_, ok = pki.RunnerID(&x509.Certificate{})
	require.False(t, ok)
}

func TestKeyAndCSRRoundTrip(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	pemKey, err := pki.EncodePrivateKey(priv)
	require.NoError(t, err)
	back, err := pki.ParsePrivateKey(pemKey)
	require.NoError(t, err)
	require.Equal(t, priv, back)

	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	require.NoError(t, err)
	csr, err := pki.ParseCSR(pki.EncodeCSR(der))
	require.NoError(t, err)
	require.Equal(t, pub, csr.PublicKey)

	// A tampered request fails its signature check.
	der[len(der)-1] ^= 0xff
	_, err = pki.ParseCSR(pki.EncodeCSR(der))
	require.Error(t, err)
}

func TestWriteFileAtomicMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key.pem")
	require.NoError(t, pki.WriteFileAtomic(path, []byte("secret"), 0o600))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestFingerprintHintIsTheLastEightCharacters(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abcdefgh", pki.FingerprintHint("abcdefgh"))
	require.Equal(t, "bcdefghi", pki.FingerprintHint("abcdefghi"))
	require.Equal(t, "abc", pki.FingerprintHint("abc"))
}

// ParseCertificates reads the CERTIFICATE blocks of a document and passes
// over others (a key in the same file); a CERTIFICATE block that does not
// parse is an error, not skipped.
func TestParseCertificatesReadsOnlyCertificateBlocks(t *testing.T) {
	t.Parallel()
	selfSigned := func(name string) *x509.Certificate {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
		require.NoError(t, err)
		c, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return c
	}
	root, other := selfSigned("root"), selfSigned("other")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not a certificate")})
	doc := append(keyPEM, pki.EncodeCertificates(root, other)...)
	certs, err := pki.ParseCertificates(doc)
	require.NoError(t, err)
	require.Len(t, certs, 2)
	require.True(t, certs[0].Equal(root))

	broken := append(pki.EncodeCertificates(root), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})...)
	_, err = pki.ParseCertificates(broken)
	require.ErrorContains(t, err, "parse certificate")
	_, err = pki.ParseCertificates(keyPEM)
	require.ErrorContains(t, err, "no certificate")
}
