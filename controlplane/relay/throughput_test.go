package relay_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/controlplane/relay"
	"github.com/runmesh/runmesh/runnerapi"
	"github.com/runmesh/runmesh/runnerapi/sessionws"
)

// selfSigned is a TLS certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(b testing.TB) (tls.Certificate, *x509.CertPool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

var benchUpgrader = websocket.Upgrader{ReadBufferSize: runnerapi.MaxSessionMessage, WriteBufferSize: runnerapi.MaxSessionMessage}

// BenchmarkRelayAcrossReplicas passes a stream through two hubs as the
// server does: the person on one (plain WebSocket), the agent's stream
// on the other (TLS), the hubs joined by relay.Peers over TLS. "in" is
// the person writing, "out" the agent.
func BenchmarkRelayAcrossReplicas(b *testing.B) {
	cert, pool := selfSigned(b)
	lease := relay.Lease{ID: uuid.New(), Attempt: 1, RunnerID: uuid.New()}
	bounds := relay.DefaultBounds
	holder := relay.NewHub(bounds) // the agent's stream stands here
	mux := http.NewServeMux()
	mux.HandleFunc("/stand", func(w http.ResponseWriter, r *http.Request) {
		c, err := benchUpgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = holder.Stand(r.Context(), lease, relay.WebSocket(c))
	})
	mux.HandleFunc(relay.LendPath+"{id}/session", func(w http.ResponseWriter, r *http.Request) {
		holder.Lend(r.Context(), lease.ID, lease.Attempt, func() (relay.Conn, error) {
			c, err := benchUpgrader.Upgrade(w, r, nil)
			if err != nil {
				return nil, err
			}
			return relay.WebSocket(c), nil
		})
	})
	hs := httptest.NewUnstartedServer(mux)
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	defer hs.Close()

	front := relay.NewHub(bounds) // the person's replica
	front.Elsewhere = &relay.Peers{List: func(context.Context) ([]string, error) { return []string{hs.URL}, nil },
		TLS: &tls.Config{RootCAs: pool}}
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := benchUpgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		front.Open(r.Context(), relay.Target{Lease: lease, TokenID: uuid.New()}, runnerapi.SessionOpen{ID: "b", Kind: runnerapi.SessionExec}, relay.WebSocket(c))
	}))
	defer ps.Close()

	const total = 256 << 20
	chunk := make([]byte, runnerapi.MaxFramePayload)
	agentDialer := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: pool}, ReadBufferSize: runnerapi.MaxSessionMessage, WriteBufferSize: runnerapi.MaxSessionMessage}
	personDialer := websocket.Dialer{ReadBufferSize: runnerapi.MaxSessionMessage, WriteBufferSize: runnerapi.MaxSessionMessage}

	// send writes total bytes as stdin or stdout frames; drain reads
	// frames until the end and counts the payload.
	send := func(c *websocket.Conn, t runnerapi.FrameType) {
		for n := 0; n < total; n += len(chunk) {
			if err := sessionws.WriteFrame(c, t, chunk); err != nil {
				b.Error(err)
				return
			}
		}
	}
	drain := func(c *websocket.Conn, until int) int {
		r := sessionws.NewReader(c)
		got := 0
		for got < until {
			msg, err := r.Read()
			if err != nil {
				b.Errorf("after %d bytes: %v", got, err)
				return got
			}
			f, _ := runnerapi.ParseFrame(msg)
			got += len(f.Payload)
		}
		return got
	}
	for _, way := range []string{"in", "out"} {
		b.Run(way, func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				agent, _, err := agentDialer.Dial("wss"+strings.TrimPrefix(hs.URL, "https")+"/stand", nil)
				if err != nil {
					b.Fatal(err)
				}
				person, _, err := personDialer.Dial("ws"+strings.TrimPrefix(ps.URL, "http"), nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := agent.ReadMessage(); err != nil { // the open
					b.Fatal(err)
				}
				if way == "in" {
					go send(person, runnerapi.FrameStdin)
					drain(agent, total)
				} else {
					go send(agent, runnerapi.FrameStdout)
					drain(person, total)
				}
				sessionws.Close(agent, runnerapi.SessionEnd{Code: runnerapi.EndExited})
				person.Close()
			}
		})
	}
}
