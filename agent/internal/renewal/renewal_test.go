package renewal_test

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/renewal"
)

func TestPointIsTwoThirdsIntoTheLifeMinusJitter(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: start, NotAfter: start.Add(24 * time.Hour)}
	if got, want := renewal.Point(leaf, 0), start.Add(16*time.Hour); !got.Equal(want) {
		t.Fatalf("Point = %v, want %v", got, want)
	}
	// The most jitter brings it forward by 5% of the lifetime.
	if got, want := renewal.Point(leaf, 0.05), start.Add(16*time.Hour-72*time.Minute); !got.Equal(want) {
		t.Fatalf("Point with jitter = %v, want %v", got, want)
	}
}

// The certificate condition: unhealthy once the certificate in use is not
// valid, and while cert.pem cannot be read, which would stop the next start.
func TestValid(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: start, NotAfter: start.Add(24 * time.Hour)}
	unreadable := errors.New("certificate: open /var/lib/runmesh-agent/cert.pem: permission denied")
	for _, c := range []struct {
		now     time.Time
		readErr error
		ok      bool
		text    string
	}{
		{start.Add(time.Hour), nil, true, "valid until 2026-01-02T00:00:00Z"},
		{start.Add(-time.Minute), nil, false, "not valid before 2026-01-01T00:00:00Z"},
		{start.Add(24 * time.Hour), nil, false, "expired at 2026-01-02T00:00:00Z"},
		{start.Add(25 * time.Hour), unreadable, false, "expired at 2026-01-02T00:00:00Z"},
		{start.Add(time.Hour), unreadable, false, unreadable.Error() + "; using the certificate read before, valid until 2026-01-02T00:00:00Z"},
	} {
		ok, text := renewal.Valid(c.now, leaf, c.readErr)
		if ok != c.ok || text != c.text {
			t.Errorf("at %v, read error %v: %v %q, want %v %q", c.now, c.readErr, ok, text, c.ok, c.text)
		}
	}
}
