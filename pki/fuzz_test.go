package pki_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/runmesh/runmesh/pki"
)

// A CSR comes from an unauthenticated enrolment: whatever it holds,
// ParseCSR returns a request whose signature checks, or an error.
func FuzzParseCSR(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, key)
	f.Add(pki.EncodeCSR(der))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte("not PEM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		csr, err := pki.ParseCSR(b)
		if err != nil {
			return
		}
		if csr.CheckSignature() != nil {
			t.Fatalf("accepted a request whose signature does not check")
		}
	})
}

// Certificate files are read from disk and from answers: whatever they
// hold, ParseCertificates returns certificates or an error.
func FuzzParseCertificates(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := pki.ParseCertificates(b)
		if err == nil && len(certs) == 0 {
			t.Fatalf("no error and no certificate from %q", b)
		}
	})
}
