// Package enrol joins a runner to the fleet: it pins the control plane's
// root by fingerprint, sends a single-use token with its public key and a
// CSR, then long-polls (signing each poll with its key) until an
// administrator decides. An interrupted enrolment leaves the runner pending;
// running it again resumes with the same key and runner id.
package enrol

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/agent/internal/runnerclient"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// Options configure an enrolment.
type Options struct {
	Server        string // https://host:port of the runner listener
	CAFingerprint string // hex SHA-256 of the root to pin
	// Token returns the enrolment token. It is called only when the runner
	// has not enrolled yet, so a resumed enrolment needs no token.
	Token func() (string, error)
	// Capacity measures the runner; the administrator sees and approves it.
	Capacity func() (runnerapi.Capacity, error)
	Name     string
	Dir      identity.Dir
	Out      io.Writer // progress for the operator
	Log      *slog.Logger
	// WaitSeconds is the length of one long-poll (the server caps it).
	WaitSeconds int
}

var (
	// ErrRejected: an administrator turned the runner away.
	ErrRejected = errors.New("the runner was rejected")
	// ErrRevoked: the runner's identity was revoked before it got a certificate.
	ErrRevoked = errors.New("the runner was revoked")
)

// Run enrols, or resumes an enrolment, and returns once the runner holds a
// certificate (cert.pem written) or the administrator said no.
func Run(ctx context.Context, o Options) (identity.State, error) {
	if o.WaitSeconds == 0 {
		o.WaitSeconds = runnerapi.MaxWaitSeconds
	}
	server, err := url.Parse(strings.TrimSuffix(o.Server, "/"))
	if err != nil || server.Scheme != "https" || server.Host == "" {
		return identity.State{}, fmt.Errorf("--server must be an https:// URL, got %q", o.Server)
	}
	if err := o.Dir.Ensure(); err != nil {
		return identity.State{}, err
	}
	st, err := o.Dir.LoadState()
	switch {
	case err == nil && st.Server != server.String():
		return st, fmt.Errorf("this state directory belongs to runner %s of %s; use another --state-dir", st.RunnerID, st.Server)
	case err == nil:
		if _, _, cerr := o.Dir.LoadChain(); cerr == nil {
			fmt.Fprintf(o.Out, "already enrolled as runner %s (%s)\n", st.RunnerID, st.Name)
			return st, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return st, err
	}

	root, err := pinnedRoot(ctx, o.Dir, server, o.CAFingerprint)
	if err != nil {
		return st, err
	}
	client, err := runnerclient.Anonymous(server.String(), root)
	if err != nil {
		return st, err
	}
	key, _, err := o.Dir.LoadOrCreateKey()
	if err != nil {
		return st, err
	}
	pub := key.Public().(ed25519.PublicKey)

	if st.RunnerID == "" {
		token, err := o.Token()
		if err != nil {
			return st, err
		}
		measured, err := o.Capacity()
		if err != nil {
			return st, fmt.Errorf("measure capacity: %w", err)
		}
		resp, err := enrol(ctx, client, token, o.Name, key, measured)
		if err != nil {
			return st, err
		}
		if resp.Fingerprint != pki.KeyFingerprint(pub) {
			return st, fmt.Errorf("the server computed fingerprint %s for our key, we compute %s", resp.Fingerprint, pki.KeyFingerprint(pub))
		}
		st = identity.State{Server: server.String(), RunnerID: resp.RunnerID, Name: o.Name}
		if err := o.Dir.SaveState(st); err != nil {
			return st, err
		}
		fmt.Fprintf(o.Out, "enrolled as runner %s (%s)\n", st.RunnerID, st.Name)
	} else {
		fmt.Fprintf(o.Out, "resuming the enrolment of runner %s (%s)\n", st.RunnerID, st.Name)
	}
	fmt.Fprintf(o.Out, "key fingerprint: %s\n", pki.KeyFingerprint(pub))
	fmt.Fprintf(o.Out, "waiting for an administrator to approve it with exactly that fingerprint...\n")

	chain, err := waitForDecision(ctx, o, client, st.RunnerID, key)
	if err != nil {
		return st, err
	}
	if err := identity.VerifyChain(chain, pub, root, st.RunnerID); err != nil {
		return st, fmt.Errorf("refusing the certificate the server sent: %w", err)
	}
	if err := o.Dir.SaveChain(chain); err != nil {
		return st, err
	}
	fmt.Fprintf(o.Out, "approved: certificate %s valid until %s, written to %s\n",
		chain[0].SerialNumber, chain[0].NotAfter.UTC().Format(time.RFC3339), o.Dir.CertPath())
	return st, nil
}

// pinnedRoot returns the root pinned in the state directory, or fetches it
// from the server and pins it when its fingerprint is the one given, and
// the server's own certificate chains to it.
func pinnedRoot(ctx context.Context, dir identity.Dir, server *url.URL, fingerprint string) (*x509.Certificate, error) {
	fingerprint = strings.ToLower(strings.ReplaceAll(fingerprint, ":", ""))
	if root, err := dir.LoadRoot(); err == nil {
		if pki.RootFingerprint(root) != fingerprint {
			return nil, fmt.Errorf("%s pins root %s, not %s", identity.RootFile, pki.RootFingerprint(root), fingerprint)
		}
		return root, nil
	}
	if len(fingerprint) != 64 {
		return nil, errors.New("--ca-fingerprint must be the root's hex SHA-256 (64 hex digits)")
	}
	// Nothing is trusted yet: accept any certificate for this one request,
	// keep what the server presented, and check all of it against the root
	// it hands us before believing either.
	var presented []*x509.Certificate
	insecure := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // verified below against the pinned fingerprint
		VerifyConnection: func(cs tls.ConnectionState) error {
			presented = cs.PeerCertificates
			return nil
		},
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.String()+"/root/"+fingerprint, nil)
	if err != nil {
		return nil, err
	}
	resp, err := insecure.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the root from %s: %w", server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server has no root with fingerprint %s (HTTP %d)", fingerprint, resp.StatusCode)
	}
	var body struct {
		CA string `json:"ca"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("read the root: %w", err)
	}
	certs, err := pki.ParseCertificates([]byte(body.CA))
	if err != nil {
		return nil, fmt.Errorf("read the root: %w", err)
	}
	root := certs[0]
	if got := pki.RootFingerprint(root); got != fingerprint {
		return nil, fmt.Errorf("the server's root has fingerprint %s, not %s: refusing it", got, fingerprint)
	}
	if err := verifyServer(presented, root, server.Hostname()); err != nil {
		return nil, fmt.Errorf("the server's certificate does not chain to the pinned root: %w", err)
	}
	if err := dir.SaveRoot(root); err != nil {
		return nil, err
	}
	return root, nil
}

func verifyServer(chain []*x509.Certificate, root *x509.Certificate, host string) error {
	if len(chain) == 0 {
		return errors.New("no certificate presented")
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
	return err
}

func enrol(ctx context.Context, client *runnerclient.Client, token, name string, key ed25519.PrivateKey, c runnerapi.Capacity) (runnerapi.EnrolResponse, error) {
	var out runnerapi.EnrolResponse
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return out, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = client.Do(ctx, http.MethodPost, runnerapi.PathEnrol, runnerapi.EnrolRequest{
		Token: token, Name: name, PublicKey: key.Public().(ed25519.PublicKey), CSR: string(pki.EncodeCSR(csrDER)), Capacity: c,
	}, &out)
	return out, err
}

func waitForDecision(ctx context.Context, o Options, client *runnerclient.Client, runnerID string, key ed25519.PrivateKey) ([]*x509.Certificate, error) {
	backoff := time.Second
	for {
		now := time.Now()
		var resp runnerapi.WaitResponse
		pollCtx, cancel := context.WithTimeout(ctx, time.Duration(o.WaitSeconds+30)*time.Second)
		err := client.Do(pollCtx, http.MethodPost, runnerapi.PathWait(runnerID), runnerapi.WaitRequest{
			Timestamp: now, Signature: ed25519.Sign(key, runnerapi.WaitMessage(runnerID, now)), WaitSeconds: o.WaitSeconds,
		}, &resp)
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted: runner %s is still pending; run enrol again to resume: %w", runnerID, ctx.Err())
		}
		if err != nil && !runnerclient.IsRefusal(err) {
			// The server is away (restarting, network): keep waiting.
			o.Log.Warn("waiting for approval: server unreachable; retrying", "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				continue
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		if err != nil {
			return nil, err
		}
		backoff = time.Second
		switch resp.Status {
		case runnerapi.StatusPending:
			continue
		case runnerapi.StatusApproved:
			return pki.ParseCertificates([]byte(resp.CertificateChain))
		case runnerapi.StatusRejected:
			return nil, fmt.Errorf("%w: %s", ErrRejected, resp.Reason)
		case runnerapi.StatusRevoked:
			return nil, fmt.Errorf("%w: %s", ErrRevoked, resp.Reason)
		default:
			return nil, fmt.Errorf("unexpected status %q", resp.Status)
		}
	}
}
