package graph_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tokens"
	"github.com/runmesh/runmesh/graph"
)

// A socket authenticates once, at connection_init, but its token is checked
// again at every operation: revoking the token stops an open socket.
func TestWebsocketOperationsRecheckTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := dialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/graphql", http.Header{})
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + b.platform}}))
	var msg map[string]any
	require.NoError(t, conn.ReadJSON(&msg))
	require.Equal(t, "connection_ack", msg["type"])

	ask := func(id string) map[string]any {
		require.NoError(t, conn.WriteJSON(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": "{ viewer { role } }"}}))
		for {
			var m map[string]any
			require.NoError(t, conn.ReadJSON(&m))
			if m["type"] == "next" || m["type"] == "error" {
				return m
			}
		}
	}
	first := ask("1")
	require.Equal(t, "PLATFORM_ADMIN", first["payload"].(map[string]any)["data"].(map[string]any)["viewer"].(map[string]any)["role"])

	_, err = b.pool.Exec(context.Background(), "UPDATE admin_tokens SET revoked_at = now()")
	require.NoError(t, err)
	second := ask("2")
	require.Contains(t, second["payload"].(map[string]any)["errors"].([]any)[0].(map[string]any)["message"], "unauthenticated", second)
	require.Nil(t, second["payload"].(map[string]any)["data"])
}

// dialSocket opens a graphql-transport-ws socket on a server of b's
// handler.
func dialSocket(t *testing.T, b *testBundle) *websocket.Conn {
	t.Helper()
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	dialer := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := dialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/graphql", http.Header{})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	return conn
}

// followAJob submits a job to pool and subscribes to its events on conn
// (acknowledged already), and returns once the first event has come: the
// operation is running, past the checks of its start.
func (b *testBundle) followAJob(t *testing.T, conn *websocket.Conn, pool uuid.UUID) {
	t.Helper()
	jobs, _, err := b.services.Queue.SubmitAll(context.Background(), record.AllOrganisations(), []queue.Submission{
		{PoolID: pool, Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: "default"}})
	require.NoError(t, err)
	require.NoError(t, conn.WriteJSON(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{
		"query": "subscription($j: ID!) { jobEvents(jobId: $j) { type } }", "variables": map[string]any{"j": jobs[0].ID}}}))
	var msg map[string]any
	require.NoError(t, conn.ReadJSON(&msg))
	require.Equal(t, "next", msg["type"], "the first event: %v", msg)
}

// closeCode reads until the socket closes, and returns its close code.
func closeCode(t *testing.T, conn *websocket.Conn) int {
	t.Helper()
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce, "closed without a close frame: %v", err)
			return ce.Code
		}
	}
}

// A refused connection_init and a socket that never sends one close with
// the protocol's codes (4403, 4408), which stock clients do not answer by
// reconnecting at once; failed logins from one address are bounded.
func TestSocketsCloseWithTheProtocolsCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *graph.Options) { o.SocketInitTimeout = 300 * time.Millisecond })

	conn := dialSocket(t, b)
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer not-a-token"}}))
	require.Equal(t, 4403, closeCode(t, conn))

	start := time.Now()
	conn = dialSocket(t, b)
	require.Equal(t, 4408, closeCode(t, conn))
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestFailedLoginsFromAnAddressAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forged, _ := tokens.Admin.New()
	for i := range graph.DefaultFailedLogins {
		r := b.do(t, forged, `{ viewer { role } }`, nil)
		require.Equal(t, http.StatusUnauthorized, r.Status, "failure %d", i+1)
	}
	r := b.do(t, forged, `{ viewer { role } }`, nil)
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Raw)
	r = b.do(t, b.platform, `{ viewer { role } }`, nil)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "the address is refused until the minute ends, good token or not")
}

// An open subscription ends, with 4403, once its token expires or is
// revoked: checked again every SocketRecheck, not only when an operation
// starts.
func TestASubscriptionEndsWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *graph.Options) { o.SocketRecheck = 100 * time.Millisecond })
	conn := dialSocket(t, b)
	require.NoError(t, conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + b.platform}}))
	var msg map[string]any
	require.NoError(t, conn.ReadJSON(&msg))
	require.Equal(t, "connection_ack", msg["type"])
	b.followAJob(t, conn, b.poolA.ID)
	_, err := b.pool.Exec(context.Background(), "UPDATE admin_tokens SET revoked_at = now()")
	require.NoError(t, err)
	start := time.Now()
	require.Equal(t, 4403, closeCode(t, conn))
	require.Less(t, time.Since(start), 3*time.Second)
}
