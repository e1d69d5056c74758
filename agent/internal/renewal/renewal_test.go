package renewal_test

import (
	"crypto/x509"
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
