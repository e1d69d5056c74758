package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/capacity/nvmltest"
	"github.com/runmesh/runmesh/agent/internal/identity"
	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

const testRunnerID = "6f9d2d0e-3c1a-4b8e-9a51-2f0c3a7d1e55"

// fakeControlPlane answers the runner API as far as an agent without a job
// runtime uses it: whoami and heartbeats (refused while failing). It keeps
// the heartbeats and counts requests for work.
type fakeControlPlane struct {
	mu      sync.Mutex // guards the fields below
	failing bool
	beats   []runnerapi.HeartbeatRequest
	leases  int
}

func (f *fakeControlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case runnerapi.PathWhoAmI:
		json.NewEncoder(w).Encode(runnerapi.WhoAmIResponse{RunnerID: testRunnerID, Name: "dgx-01"})
	case runnerapi.PathHeartbeat:
		var req runnerapi.HeartbeatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if f.failing {
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(runnerapi.Error{Error: runnerapi.ErrorBody{Code: runnerapi.CodeInternal, Message: "internal error"}})
			return
		}
		f.beats = append(f.beats, req)
		json.NewEncoder(w).Encode(runnerapi.HeartbeatResponse{NextHeartbeatSeconds: 1})
	case runnerapi.PathLeases:
		f.leases++
		json.NewEncoder(w).Encode(runnerapi.LeaseResponse{})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeControlPlane) fail(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = on
}

// carried is the condition name as the n-th answered heartbeat from the
// end carried it (n = 1: the last), once there are that many.
func (f *fakeControlPlane) carried(n int, name string) (runnerapi.Condition, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.beats) < n {
		return runnerapi.Condition{}, false
	}
	for _, c := range f.beats[len(f.beats)-n].Health {
		if c.Name == name {
			return c, true
		}
	}
	return runnerapi.Condition{}, false
}

func (f *fakeControlPlane) counts() (beats, leases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.beats), f.leases
}

// enrolled is a state directory holding an approved runner's identity, and
// start, which serves h as its control plane: over TLS, with a certificate
// from the runner's pinned root.
func enrolled(t *testing.T) (dir string, start func(http.Handler) *httptest.Server) {
	t.Helper()
	dir = t.TempDir()
	key, _, err := identity.Dir(dir).LoadOrCreateKey()
	require.NoError(t, err)
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	root := sign(t, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	leaf := sign(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: testRunnerID},
		URIs: []*url.URL{pki.RunnerURI(testRunnerID)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, root, key.Public(), rootKey)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvCert := sign(t, &x509.Certificate{SerialNumber: big.NewInt(3), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, root, &srvKey.PublicKey, rootKey)
	d := identity.Dir(dir)
	require.NoError(t, d.SaveRoot(root))
	require.NoError(t, d.SaveChain([]*x509.Certificate{leaf}))
	return dir, func(h http.Handler) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey, Leaf: srvCert}},
			ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		require.NoError(t, d.SaveState(identity.State{Server: srv.URL, RunnerID: testRunnerID, Name: "dgx-01"}))
		return srv
	}
}

func sign(t *testing.T, tmpl, parent *x509.Certificate, pub any, key *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

// notifications listens where systemd would for sd_notify messages, and
// keeps them.
type notifications struct {
	mu   sync.Mutex // guards msgs
	msgs []string
}

func listenNotify(t *testing.T) *notifications {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	n := &notifications{}
	go func() {
		buf := make([]byte, 1<<16)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

// status is the last STATUS= line, and whether READY=1 came before it.
func (n *notifications) status() (line string, ready bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.msgs {
		ready = ready || m == "READY=1"
		if s, ok := strings.CutPrefix(m, "STATUS="); ok {
			line = s
		}
	}
	return line, ready
}

// The agent's conditions follow what happens to it, and both its
// heartbeats and its STATUS= line say so: without a job runtime it says
// why and asks for no work; while heartbeats fail, and once a GPU reports
// a critical XID, it is unhealthy; a stop drains it, and STATUS= says that.
func TestTheAgentsHealthFollowsEvents(t *testing.T) {
	notify := listenNotify(t)
	dir, serve := enrolled(t)
	cp := &fakeControlPlane{}
	serve(cp)
	lib, xid := nvmltest.XIDServer()
	cfg := DefaultConfig(dir)
	cfg.Metrics.Listen, cfg.NVML, cfg.Log = "off", lib, slog.New(slog.DiscardHandler)
	cfg.Podman = filepath.Join(t.TempDir(), "podman") // none there
	stop := make(chan os.Signal, 2)
	done := make(chan error, 1)
	go func() { done <- Run(t.Context(), cfg, stop) }()

	statusHas := func(what string, want ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			line, _ := notify.status()
			for _, w := range want {
				if !strings.Contains(line, w) {
					return false
				}
			}
			return true
		}, 15*time.Second, 10*time.Millisecond, what)
	}
	carriedNow := func(what string, n int, name string, ok bool, title string) {
		t.Helper()
		require.Eventually(t, func() bool {
			c, found := cp.carried(n, name)
			return found && c.OK == ok && strings.HasPrefix(c.Title, title)
		}, 15*time.Second, 10*time.Millisecond, what)
	}

	// Without podman: ready, since there is nothing to check, but no work.
	statusHas("ready, and why it runs no job", "serving; 0 jobs; certificate valid until ", "unhealthy: runtime: cannot run jobs: ")
	_, ready := notify.status()
	require.True(t, ready, "READY=1 came first")
	carriedNow("the heartbeat says why", 1, condRuntime, false, "job runtime: cannot run jobs: ")
	carriedNow("GPUs measured", 1, condNVML, true, "GPU measurement (NVML): 8 GPUs, driver ")
	carriedNow("no GPU is unhealthy", 1, condGPU, true, "GPU health (XID and ECC events): 8 GPUs healthy")
	beats, _ := cp.counts()
	require.Eventually(t, func() bool { n, _ := cp.counts(); return n >= beats+2 }, 15*time.Second, 10*time.Millisecond)
	_, leases := cp.counts()
	require.Zero(t, leases, "an agent that cannot run jobs asks for none")

	// Heartbeats refused, then answered again: the first answered one
	// carries the failure.
	cp.fail(true)
	statusHas("heartbeats failing", "unhealthy: heartbeat: the server refused: internal error")
	cp.fail(false)
	carriedNow("the failure reported", 1, condHeartbeat, false, "heartbeats answered by the control plane: the server refused")
	carriedNow("and its end", 1, condHeartbeat, true, "heartbeats answered by the control plane: answered")

	// XID 79: GPU 3 fell off the bus.
	xid <- nvml.EventData{Device: lib.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	carriedNow("GPU 3 unhealthy", 1, condGPU, false, "GPU health (XID and ECC events): GPU 3 (")
	statusHas("GPU 3 unhealthy", "gpu: GPU 3 (", "XID 79 at ")

	stop <- syscall.SIGTERM
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("an agent holding no job did not end its drain")
	}
	statusHas("draining", "draining; 0 jobs; ", "draining: stopping: no new work")
}
