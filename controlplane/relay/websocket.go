package relay

import (
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/runnerapi"
	"github.com/runmesh/runmesh/runnerapi/sessionws"
)

// WebSocket is c as a Conn: binary messages, each one frame, at most
// runnerapi.MaxSessionMessage (a larger one fails the read, and the
// session ends frame_too_large). A message read is valid until the next
// Read: the relay writes it on before it reads again.
func WebSocket(c *websocket.Conn) Conn {
	return &wsConn{c: c, r: sessionws.NewReader(c)}
}

type wsConn struct {
	c      *websocket.Conn
	r      *sessionws.Reader
	mu     sync.Mutex // writes
	closed bool
}

// ErrTextMessage: a session carries binary messages only.
var ErrTextMessage = sessionws.ErrTextMessage

func (w *wsConn) Read() ([]byte, error) { return w.r.Read() }

func (w *wsConn) Write(msg []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return websocket.ErrCloseSent
	}
	return w.c.WriteMessage(websocket.BinaryMessage, msg)
}

func (w *wsConn) Close(end runnerapi.SessionEnd) {
	// A writer blocked on a peer that stopped reading holds mu: a
	// deadline on the connection frees it.
	_ = w.c.NetConn().SetWriteDeadline(time.Now().Add(sessionws.CloseWait))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	sessionws.Close(w.c, end)
}

// Hijackable is w, or the writer it wraps that can hand over its
// connection: gorilla's Upgrader asserts http.Hijacker on the writer it is
// given, and the listeners' instrumenting writers only Unwrap to theirs.
func Hijackable(w http.ResponseWriter) http.ResponseWriter {
	for {
		if _, ok := w.(http.Hijacker); ok {
			return w
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
