package renewal

import (
	"crypto/x509"
	"errors"
	"math/big"
	"strings"
	"testing"
)

// A renewal the server refuses at the handshake says what to do; other
// failures are passed on as they are.
func TestARefusedCertificateSaysWhatToDo(t *testing.T) {
	t.Parallel()
	leaf := &x509.Certificate{SerialNumber: big.NewInt(42)}
	refused := errors.New(`Post "https://x/renew": remote error: tls: bad certificate`)
	err := refusedAdvice(refused, leaf)
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "the server refuses certificate 42") || !strings.Contains(err.Error(), "step ca renew --force") {
		t.Fatalf("advice: %v", err)
	}
	other := errors.New("dial tcp: connection refused")
	if got := refusedAdvice(other, leaf); got != other {
		t.Fatalf("another failure: %v", got)
	}
}
