package graph_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
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
