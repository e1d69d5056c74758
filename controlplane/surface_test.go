package controlplane_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane"
	"github.com/runmesh/runmesh/pki/ca"
	"github.com/runmesh/runmesh/runnerapi"
)

// stepAnswer is a step-ca route's answer: status, and step's JSON error.
type stepAnswer struct {
	Status  int
	Message string
	Bytes   int
}

func (b *testBundle) step(t testing.TB, c *http.Client, method, path string, body io.Reader) stepAnswer {
	t.Helper()
	req, err := http.NewRequest(method, b.runnerURL+path, body)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &e)
	require.Equal(t, resp.StatusCode, e.Status, "the status in step's error format: %s", raw)
	return stepAnswer{Status: resp.StatusCode, Message: e.Message, Bytes: len(raw)}
}

// The step-ca routes are open to anyone who reaches the listener: every
// body is bounded before step-ca parses it, a revocation is refused before
// its serial is parsed unless it names a caller and a plausible serial,
// and unknown routes answer in step's error format. None of it is slow.
func TestTheStepRoutesAreBoundedBeforeTheyParse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	anon := b.client(nil)
	revocations := func() int { return b.count(t, "SELECT count(*) FROM certificate_revocations") }
	before := revocations()
	start := time.Now()

	a := b.step(t, anon, http.MethodPost, "/revoke", strings.NewReader(`{"serial": "`+strings.Repeat("9", 8<<20)+`"}`))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.Status)
	a = b.step(t, anon, http.MethodPost, "/sign", strings.NewReader(strings.Repeat("x", 64<<20)))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.Status)
	require.Less(t, a.Bytes, 1024, "nothing echoed back")
	// Chunked, so no Content-Length warns: cut as it is read.
	a = b.step(t, anon, http.MethodPost, "/revoke", io.MultiReader(strings.NewReader(`{"serial": "`), strings.NewReader(strings.Repeat("9", ca.MaxStepBodyBytes))))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.Status)

	for name, body := range map[string]string{
		"a serial no certificate has": `{"serial": "` + strings.Repeat("9", 1000) + `"}`,
		"letters":                     `{"serial": "12ab"}`,
		"no serial":                   `{"reasonCode": 1}`,
		"not JSON":                    `serial=1`,
	} {
		a := b.step(t, anon, http.MethodPost, "/revoke", strings.NewReader(body))
		require.Equal(t, http.StatusBadRequest, a.Status, name)
	}
	a = b.step(t, anon, http.MethodPost, "/revoke", strings.NewReader(`{"serial": "12345", "reasonCode": 1}`))
	require.Equal(t, http.StatusUnauthorized, a.Status, "neither a client certificate nor a token")
	require.Equal(t, before, revocations(), "nothing revoked")

	a = b.step(t, anon, http.MethodGet, "/no-such-route", nil)
	require.Equal(t, http.StatusNotFound, a.Status)
	a = b.step(t, anon, http.MethodDelete, "/roots", nil)
	require.Equal(t, http.StatusMethodNotAllowed, a.Status)
	require.Less(t, time.Since(start), 10*time.Second)

	resp, err := anon.Get(b.runnerURL + "/version")
	require.NoError(t, err)
	defer resp.Body.Close()
	var v struct{ Version string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.Equal(t, "runmesh "+controlplane.Version, v.Version)
}

// A peer that trickles a body loses its connection after the read timeout,
// and one address holds at most MaxUnauthenticatedPerPeer requests in
// flight without a client certificate.
func TestUnauthenticatedPeersHoldLittle(t *testing.T) {
	t.Parallel()
	// Long enough that all 16 are in flight together on a loaded machine,
	// short enough to wait out.
	const readTimeout = 8 * time.Second
	b := setup(t, func(o *controlplane.Options) { o.ReadTimeout = readTimeout })
	host := strings.TrimPrefix(b.runnerURL, "https://")
	trickle := func() *tls.Conn {
		conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: b.roots(), ServerName: "127.0.0.1"})
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", runnerapi.PathEnrol, host)
		require.NoError(t, err)
		return conn
	}
	var held []*tls.Conn
	opened := time.Now()
	for range 16 { // runnerhttp.MaxUnauthenticatedPerPeer
		held = append(held, trickle())
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	require.Eventually(t, func() bool {
		r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, []byte(`{}`))
		return r.Status == http.StatusTooManyRequests && r.Code == runnerapi.CodeTooMany
	}, 5*time.Second, 20*time.Millisecond, "a seventeenth is refused")

	// The trickled requests end at the read timeout, and their slots with them.
	held[0].SetReadDeadline(time.Now().Add(3 * readTimeout))
	_, _ = io.ReadAll(held[0])
	require.Less(t, time.Since(opened), readTimeout+4*time.Second, "the server let go of a trickled body")
	require.Eventually(t, func() bool {
		r := b.call(t, b.client(nil), http.MethodPost, runnerapi.PathEnrol, bytes.Repeat([]byte(" "), 1))
		return r.Status == http.StatusBadRequest
	}, 5*time.Second, 50*time.Millisecond, "room again once they ended")
}
