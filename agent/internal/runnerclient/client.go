// Package runnerclient is the agent's HTTPS client for the runner API: the
// pinned root for the server, and the runner's current certificate for
// itself, picked afresh at every handshake so a renewed certificate is used
// without a restart.
package runnerclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// Client talks to one runner listener.
//
// A connection presents the certificate current when it was made, for as
// long as it is kept alive. So that a certificate renewed by anyone (the
// agent, or step ca renew --daemon on its files) is what the next request
// presents, the connections made with an older one are dropped as soon as
// they are idle: before a request that sees the certificate changed, and
// after one during which it changed.
type Client struct {
	base string
	http *http.Client
	cert func(*tls.CertificateRequestInfo) (*tls.Certificate, error) // nil: anonymous

	mu   sync.Mutex
	seen *tls.Certificate // the certificate the pool's connections were made with
}

// New is a client that authenticates as id.
func New(id *identity.Identity) (*Client, error) {
	return newClient(id.State.Server, id.Root, id.ClientCertificate)
}

// Anonymous is a client without a client certificate (enrolment).
func Anonymous(server string, root *x509.Certificate) (*Client, error) {
	return newClient(server, root, nil)
}

func newClient(server string, root *x509.Certificate, getCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(server, "/"))
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server must be an https:// URL, got %q", server)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs:              roots,
			ServerName:           u.Hostname(),
			MinVersion:           tls.VersionTLS12,
			GetClientCertificate: getCert,
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{base: u.String(), http: &http.Client{Transport: tr}, cert: getCert}, nil
}

// current is the certificate a new connection would present.
func (c *Client) current() *tls.Certificate {
	if c.cert == nil {
		return nil
	}
	cert, _ := c.cert(nil)
	return cert
}

// dropOlder closes the idle connections when the certificate is no longer
// the one they were made with.
func (c *Client) dropOlder(now *tls.Certificate) {
	c.mu.Lock()
	changed := c.seen != now
	c.seen = now
	c.mu.Unlock()
	if changed {
		c.http.CloseIdleConnections()
	}
}

// dropAll closes the idle connections after a request failed in transit
// (timed out, reset, unreachable): they may be as dead as its own, which
// the transport has closed, and a retry must not wait on one of them.
func (c *Client) dropAll() {
	c.http.CloseIdleConnections()
}

// APIError is a refusal from the runner API, with its stable code.
type APIError struct {
	Status int
	Code   string
	Msg    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("the server refused: %s (%s, HTTP %d)", e.Msg, e.Code, e.Status)
}

// Unwrap is the refusal as the runner API's body carried it, so that code
// given the client behind an interface reads its code with runnerapi alone.
func (e *APIError) Unwrap() error { return &runnerapi.ErrorBody{Code: e.Code, Message: e.Msg} }

// Do sends in as JSON (nil: no body) and decodes the answer into out. A
// non-2xx answer is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, method, path, in, out, maxAnswerBytes)
}

// maxAnswerBytes bounds what the agent reads of an answer, lease answers
// aside (see Lease).
const maxAnswerBytes = 4 << 20

func (c *Client) do(ctx context.Context, method, path string, in, out any, limit int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := c.current()
	c.dropOlder(start)
	resp, err := c.http.Do(req)
	if err != nil {
		c.dropAll()
		return err
	}
	// Deferred first, so it runs after the body is closed and the
	// connection is idle: one made before a renewal during the request
	// (a long poll) is not used again.
	defer func() {
		if now := c.current(); now != start {
			c.dropOlder(now)
		}
	}()
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err == nil && len(raw) > limit {
		return fmt.Errorf("%s %s: the answer is over %d bytes", method, path, limit)
	}
	if err != nil {
		c.dropAll()
		return err
	}
	if resp.StatusCode >= 300 {
		var e runnerapi.Error
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			// step-ca's endpoints answer {"status":..., "message":...}.
			var step struct{ Message string }
			_ = json.Unmarshal(raw, &step)
			e.Error = runnerapi.ErrorBody{Code: http.StatusText(resp.StatusCode), Message: step.Message}
		}
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Msg: e.Error.Message}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// IsRefusal reports whether err is the server saying no (as opposed to the
// server being unreachable).
func IsRefusal(err error) bool {
	var e *APIError
	return errors.As(err, &e)
}

// WhoAmI asks who the server thinks we are.
func (c *Client) WhoAmI(ctx context.Context) (runnerapi.WhoAmIResponse, error) {
	var out runnerapi.WhoAmIResponse
	err := c.Do(ctx, http.MethodGet, runnerapi.PathWhoAmI, nil, &out)
	return out, err
}

// Renew asks step-ca's /renew for a fresh certificate for the one this
// connection presents, and returns the new chain.
func (c *Client) Renew(ctx context.Context) ([]*x509.Certificate, error) {
	var out struct {
		CertChain []string `json:"certChain"`
		Crt       string   `json:"crt"`
		CA        string   `json:"ca"`
	}
	if err := c.Do(ctx, http.MethodPost, "/renew", nil, &out); err != nil {
		return nil, err
	}
	pemChain := strings.Join(out.CertChain, "")
	if pemChain == "" {
		pemChain = out.Crt + out.CA
	}
	return pki.ParseCertificates([]byte(pemChain))
}

// CloseIdle drops kept-alive connections, so the next request handshakes
// with the current certificate.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// leaseGrace is how long past its wait a lease request may take.
var leaseGrace = 10 * time.Second

// Lease asks for work; it long-polls up to req.WaitSeconds.
func (c *Client) Lease(ctx context.Context, req runnerapi.LeaseRequest) ([]runnerapi.Lease, error) {
	// The server answers by the end of the wait; one that cannot (its
	// host gone, the network cut) must not hold the agent's only request
	// for work until TCP gives up, minutes later.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(min(max(req.WaitSeconds, 0), runnerapi.MaxWaitSeconds))*time.Second+leaseGrace)
	defer cancel()
	var out runnerapi.LeaseResponse
	// Up to req.Max full job specs, which can outgrow other answers.
	err := c.do(ctx, http.MethodPost, runnerapi.PathLeases, req, &out, max(runnerapi.LeaseAnswerBytes(req.Max), maxAnswerBytes))
	return out.Leases, err
}

// UploadLog sends one chunk of a lease's output.
func (c *Client) UploadLog(ctx context.Context, leaseID string, chunk runnerapi.LogUpload) error {
	return c.Do(ctx, http.MethodPost, runnerapi.PathLeaseLogs(leaseID), chunk, nil)
}

// Result reports how an attempt ended.
func (c *Client) Result(ctx context.Context, leaseID string, req runnerapi.ResultRequest) (runnerapi.ResultResponse, error) {
	var out runnerapi.ResultResponse
	err := c.Do(ctx, http.MethodPost, runnerapi.PathLeaseResult(leaseID), req, &out)
	return out, err
}

// Code is the stable code of a refusal, or "" for any other error.
func Code(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Session dials the stream for a lease's next session (runnerapi.
// PathSession), fenced by attempt: a WebSocket over the same mutual TLS
// as every request. A refusal (a stale attempt: 409) is an *APIError.
func (c *Client) Session(ctx context.Context, leaseID string, attempt int) (*websocket.Conn, error) {
	u, err := url.Parse(c.base + runnerapi.PathSession(leaseID))
	if err != nil {
		return nil, err
	}
	u.Scheme = "wss"
	u.RawQuery = url.Values{"attempt": {strconv.Itoa(attempt)}}.Encode()
	d := websocket.Dialer{
		TLSClientConfig:  c.http.Transport.(*http.Transport).TLSClientConfig.Clone(),
		HandshakeTimeout: 30 * time.Second,
		ReadBufferSize:   runnerapi.MaxSessionMessage,
		WriteBufferSize:  runnerapi.MaxSessionMessage,
	}
	conn, resp, err := d.DialContext(ctx, u.String(), nil)
	if err != nil && resp != nil {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		var e runnerapi.Error
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			e.Error = runnerapi.ErrorBody{Code: http.StatusText(resp.StatusCode)}
		}
		return nil, &APIError{Status: resp.StatusCode, Code: e.Error.Code, Msg: e.Error.Message}
	}
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(runnerapi.MaxSessionMessage)
	return conn, nil
}
