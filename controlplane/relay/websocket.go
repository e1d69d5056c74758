package relay

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/runnerapi"
)

// closeWait bounds the last frame and the close message to a peer that
// stopped reading.
const closeWait = time.Second

// WebSocket is c as a Conn: binary messages, each one frame, at most
// runnerapi.MaxSessionMessage (a larger one fails the read, and the
// session ends frame_too_large).
func WebSocket(c *websocket.Conn) Conn {
	c.SetReadLimit(runnerapi.MaxSessionMessage)
	return &wsConn{c: c}
}

type wsConn struct {
	c      *websocket.Conn
	mu     sync.Mutex // writes
	closed bool
}

// ErrTextMessage: a session carries binary messages only.
var ErrTextMessage = errors.New("a text message in a session")

func (w *wsConn) Read() ([]byte, error) {
	t, msg, err := w.c.ReadMessage()
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		return nil, runnerapi.ErrFrameTooLarge
	case err != nil:
		return nil, err
	case t != websocket.BinaryMessage:
		return nil, ErrTextMessage
	}
	return msg, nil
}

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
	_ = w.c.NetConn().SetWriteDeadline(time.Now().Add(closeWait))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	_ = w.c.SetWriteDeadline(time.Now().Add(closeWait))
	_ = w.c.WriteMessage(websocket.BinaryMessage, runnerapi.JSONFrame(runnerapi.FrameEnd, end))
	reason := end.Reason
	if len(reason) > 120 {
		reason = reason[:120]
	}
	_ = w.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(end.CloseCode(), reason), time.Now().Add(closeWait))
	_ = w.c.Close()
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
