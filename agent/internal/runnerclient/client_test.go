package runnerclient

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// anonymous is a client of srv without a client certificate.
func anonymous(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	c, err := Anonymous(srv.URL, srv.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A lease answer may be as large as the leases asked for; every other
// answer is bounded to 4 MiB.
func TestAnswersAreBoundedByWhatWasAskedFor(t *testing.T) {
	// One lease with an env of 5 MiB: more than any other answer may be.
	big := runnerapi.LeaseResponse{Leases: []runnerapi.Lease{{LeaseID: "l", Env: map[string]string{"X": strings.Repeat("x", 5<<20)}}}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(big)
	}))
	defer srv.Close()
	c := anonymous(t, srv)
	ctx := context.Background()
	var out runnerapi.LeaseResponse
	if err := c.Do(ctx, http.MethodGet, "/other", nil, &out); err == nil || !strings.Contains(err.Error(), "over 4194304 bytes") {
		t.Fatalf("a 5 MiB answer to another request: %v, want refused", err)
	}
	leases, err := c.Lease(ctx, runnerapi.LeaseRequest{Max: 16})
	if err != nil || len(leases) != 1 {
		t.Fatalf("a 5 MiB answer to a request for 16 leases: %v, %d leases", err, len(leases))
	}
	if _, err := c.Lease(ctx, runnerapi.LeaseRequest{Max: 1}); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("a 5 MiB answer to a request for one lease: %v, want refused", err)
	}
}

// A certificate swapped under a client (renewed by the agent, or by step
// on its files) is what the next request presents: a connection kept alive
// from before, idle or in a request at the time, is not used again.
func TestARenewedCertificateIsPresentedAtTheNextRequest(t *testing.T) {
	var mu sync.Mutex
	var presented []string
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		presented = append(presented, r.TLS.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
		if r.URL.Path == "/long" {
			<-release
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()

	var cert atomic.Pointer[tls.Certificate]
	cert.Store(selfSigned(t, "first"))
	c, err := newClient(srv.URL, srv.Certificate(), func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.Load(), nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out struct{}
	get := func(path string) {
		if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
			t.Fatal(err)
		}
	}
	get("/a")
	get("/b") // kept alive
	cert.Store(selfSigned(t, "second"))
	get("/c")

	// Renewed while a long poll holds its connection.
	done := make(chan struct{})
	go func() { get("/long"); close(done) }()
	testutil.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(presented) == 4
	}, "the long poll presented its certificate")
	cert.Store(selfSigned(t, "third"))
	close(release)
	<-done
	get("/d")

	want := []string{"first", "first", "second", "second", "third"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(presented, want) {
		t.Fatalf("presented %v, want %v", presented, want)
	}
}

func selfSigned(t *testing.T, name string) *tls.Certificate {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}

// A request that fails in transit (here: timed out) leaves no pooled
// connection behind for the retry: the others may be as dead as its own.
func TestARequestFailedInTransitLeavesNoConnectionToReuse(t *testing.T) {
	var opened atomic.Int32
	both := make(chan struct{})
	var arrived atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			<-r.Context().Done()
		case "/pair": // holds the first until the second arrives: two connections
			if arrived.Add(1) == 2 {
				close(both)
			}
			<-both
		}
		_, _ = w.Write([]byte("{}"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	c := anonymous(t, srv)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := c.Do(ctx, http.MethodGet, "/pair", nil, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d connections for two requests at once, want 2", n)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.Do(short, http.MethodGet, "/hang", nil, nil); err == nil {
		t.Fatal("a request past its deadline succeeded")
	}
	if err := c.Do(ctx, http.MethodGet, "/ok", nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := opened.Load(); n != 3 {
		t.Fatalf("%d connections: the retry went out on one pooled before the failure, want a fresh one", n)
	}
}

// A request for work that the server never answers ends shortly after its
// wait would have.
func TestARequestForWorkEndsPastItsWait(t *testing.T) {
	defer func(g time.Duration) { leaseGrace = g }(leaseGrace)
	leaseGrace = 300 * time.Millisecond
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := anonymous(t, srv)
	start := time.Now()
	if _, err := c.Lease(context.Background(), runnerapi.LeaseRequest{Max: 1, WaitSeconds: 1}); err == nil {
		t.Fatal("an unanswered request for work succeeded")
	}
	if took := time.Since(start); took < time.Second || took > 3*time.Second {
		t.Fatalf("an unanswered request for work with a 1 s wait ended after %v", took)
	}
}
