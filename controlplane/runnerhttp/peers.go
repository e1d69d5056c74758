package runnerhttp

import (
	"net"
	"net/http"
	"sync"

	"github.com/runmesh/runmesh/runnerapi"
)

// MaxUnauthenticatedPerPeer bounds the requests one address may have in
// flight without a client certificate (enrolment, its long poll, step-ca's
// bootstrap routes): a runner needs one or two; more only hold the
// server's memory and connections.
const MaxUnauthenticatedPerPeer = 16

// peerLimit counts the requests in flight without a client certificate, by
// remote address.
type peerLimit struct {
	mu       sync.Mutex
	inFlight map[string]int
	max      int
}

func newPeerLimit(max int) *peerLimit { return &peerLimit{inFlight: map[string]int{}, max: max} }

// limit answers 429 too_many_requests to a request without a client
// certificate from an address that has max of them in flight already;
// requests with one pass (they are authenticated further in).
func (p *peerLimit) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if !p.acquire(host) {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, runnerapi.CodeTooMany, "too many requests in flight from this address without a client certificate")
			return
		}
		defer p.release(host)
		next.ServeHTTP(w, r)
	})
}

func (p *peerLimit) acquire(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[host] >= p.max {
		return false
	}
	p.inFlight[host]++
	return true
}

func (p *peerLimit) release(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[host]--; p.inFlight[host] <= 0 {
		delete(p.inFlight, host)
	}
}
