package controlplane

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHealthOfCertificates(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	cert := func(from, until time.Duration) *x509.Certificate {
		return &x509.Certificate{NotBefore: now.Add(from), NotAfter: now.Add(until)}
	}
	day := 24 * time.Hour
	root, inter := cert(-day, 20*365*day), cert(-day, 10*365*day)

	ok, text := caValid(now, root, inter)
	require.True(t, ok)
	require.Equal(t, "root until 2050-05-27T12:00:00Z, intermediate until 2040-05-29T12:00:00Z", text)
	ok, text = caValid(now, root, cert(-10*365*day, 0))
	require.False(t, ok, "a certificate is expired at its NotAfter")
	require.Equal(t, "CA intermediate expired at 2030-06-01T12:00:00Z", text)
	ok, text = caValid(now, cert(time.Hour, day), inter)
	require.False(t, ok)
	require.Equal(t, "CA root not valid before 2030-06-01T13:00:00Z", text)

	ok, text = certValid(now, "runner listener certificate", nil)
	require.False(t, ok)
	require.Equal(t, "runner listener certificate not issued yet", text)

	ok, _ = notExpiring(now, root, inter, cert(-time.Hour, 2*time.Hour))
	require.True(t, ok, "a listener certificate a third into its life")
	ok, text = notExpiring(now, root, cert(-day, 29*day), cert(-5*time.Hour-time.Minute, 55*time.Minute))
	require.False(t, ok)
	require.Equal(t, "CA intermediate expires at 2030-06-30T12:00:00Z; "+
		"runner listener certificate expires at 2030-06-01T12:55:00Z and is not renewed yet", text)
}
