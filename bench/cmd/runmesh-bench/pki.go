package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

type pkiOptions struct {
	runners  int
	duration time.Duration
	workers  int
}

// benchPKI measures, against a real control plane and PostgreSQL:
//   - approval → certificate on the runner: from sending approveRunner to
//     the runner's pending long-poll returning its certificate;
//   - full mutual-TLS handshakes per second (no session resumption), each
//     checking the client certificate against the database.
func benchPKI(ctx context.Context, o pkiOptions, out io.Writer) error {
	e, err := startEnv(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	roots := x509.NewCertPool()
	roots.AddCert(e.keys.Root)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	runnerURL := "https://" + e.runnerAddr

	var latencies []time.Duration
	var cert *tls.Certificate
	for i := range o.runners {
		r, err := enrolOne(ctx, e.admin(), e.poolID, anon, runnerURL, fmt.Sprintf("bench-%d", i), runnerapi.Capacity{})
		if err != nil {
			return err
		}
		got := make(chan result, 1)
		go func() { got <- r.wait(ctx, anon, runnerURL) }()
		time.Sleep(20 * time.Millisecond) // let the long-poll reach the server
		start := time.Now()
		if err := approve(ctx, e.admin(), r.id, pki.KeyFingerprint(r.key.Public().(ed25519.PublicKey))); err != nil {
			return err
		}
		res := <-got
		if res.err != nil {
			return res.err
		}
		latencies = append(latencies, res.at.Sub(start))
		cert = res.cert
	}

	handshakes, cpu, err := handshakeLoop(ctx, e.runnerAddr, roots, cert, o)
	if err != nil {
		return err
	}
	slices.Sort(latencies)
	fmt.Fprintf(out, "runmesh-bench pki — %s; PostgreSQL durable (fsync on); server in this process\n", machine())
	fmt.Fprintf(out, "approval → certificate on runner (n=%d, each runner long-polling before approval):\n", len(latencies))
	fmt.Fprintf(out, "  p50 %v   p90 %v   p99 %v   max %v   (goal < 1s: %s)\n",
		pct(latencies, 50), pct(latencies, 90), pct(latencies, 99), latencies[len(latencies)-1], verdict(pct(latencies, 99) < time.Second))
	fmt.Fprintf(out, "mTLS handshakes (%d workers, %v, full TLS 1.3 handshakes, client certificate checked against PostgreSQL):\n", o.workers, o.duration)
	fmt.Fprintf(out, "  %.0f handshakes/s; CPU %.2f cores for server and clients together\n",
		float64(handshakes)/o.duration.Seconds(), cpu.Seconds()/o.duration.Seconds())
	return nil
}

type benchRunner struct {
	id  string
	key ed25519.PrivateKey
}

type result struct {
	at   time.Time
	cert *tls.Certificate
	err  error
}

func enrolOne(ctx context.Context, a admin, poolID string, c *http.Client, runnerURL, name string, capacity runnerapi.Capacity) (benchRunner, error) {
	var r benchRunner
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return r, err
	}
	r.key = key
	data, err := a.gql(ctx, `mutation($p: ID!) { createEnrolmentToken(poolId: $p) { token } }`, map[string]any{"p": poolID})
	if err != nil {
		return r, err
	}
	var tok struct{ CreateEnrolmentToken struct{ Token string } }
	if err := json.Unmarshal(data, &tok); err != nil {
		return r, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return r, err
	}
	var resp runnerapi.EnrolResponse
	if err := postJSON(ctx, c, runnerURL+runnerapi.PathEnrol, runnerapi.EnrolRequest{
		Token: tok.CreateEnrolmentToken.Token, Name: name, PublicKey: key.Public().(ed25519.PublicKey), CSR: string(pki.EncodeCSR(csr)),
		Capacity: capacity,
	}, &resp); err != nil {
		return r, err
	}
	r.id = resp.RunnerID
	return r, nil
}

func (r benchRunner) wait(ctx context.Context, c *http.Client, runnerURL string) result {
	now := time.Now()
	var resp runnerapi.WaitResponse
	err := postJSON(ctx, c, runnerURL+runnerapi.PathWait(r.id), runnerapi.WaitRequest{
		Timestamp: now, Signature: ed25519.Sign(r.key, runnerapi.WaitMessage(r.id, now)), WaitSeconds: 30,
	}, &resp)
	if err != nil {
		return result{err: err}
	}
	chain, err := pki.ParseCertificates([]byte(resp.CertificateChain))
	if err != nil {
		return result{err: fmt.Errorf("runner %s: status %s: %w", r.id, resp.Status, err)}
	}
	at := time.Now()
	c2 := &tls.Certificate{PrivateKey: r.key, Leaf: chain[0]}
	for _, x := range chain {
		c2.Certificate = append(c2.Certificate, x.Raw)
	}
	return result{at: at, cert: c2}
}

func approve(ctx context.Context, a admin, id, fp string) error {
	_, err := a.gql(ctx, `mutation($id: ID!, $fp: String!) { approveRunner(id: $id, fingerprint: $fp) { status } }`, map[string]any{"id": id, "fp": fp})
	return err
}

func handshakeLoop(ctx context.Context, addr string, roots *x509.CertPool, cert *tls.Certificate, o pkiOptions) (int64, time.Duration, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }}
	var n atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			d := &tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
			for ctx.Err() == nil {
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				conn.Close()
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, fmt.Errorf("handshake: %w", err)
	}
	return n.Load(), cpuTime() - cpu0, nil
}

func postJSON(ctx context.Context, c *http.Client, url string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)].Round(10 * time.Microsecond)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
