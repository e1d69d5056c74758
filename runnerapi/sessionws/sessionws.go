// Package sessionws carries the session protocol (runnerapi/session.go) on
// a WebSocket, for the three that speak it: the agent, the server's relay
// and the CLI. It reads and writes frames without allocating per frame:
// runmesh cp passes hundreds of MiB through each of them, and a fresh
// buffer per 32 KiB message kept the garbage collector busier than the
// copy (make bench-interactive).
package sessionws

import (
	"errors"
	"io"
	"time"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/runnerapi"
)

// ErrTextMessage: a session carries binary messages only.
var ErrTextMessage = errors.New("a text message in a session")

// Reader reads whole messages into one buffer of its own, made when the
// first message arrives: a stream standing for a session that may never
// come costs none.
type Reader struct {
	c   *websocket.Conn
	buf []byte
}

// NewReader reads c's messages, each at most runnerapi.MaxSessionMessage
// (it sets c's read limit).
func NewReader(c *websocket.Conn) *Reader {
	c.SetReadLimit(runnerapi.MaxSessionMessage)
	return &Reader{c: c}
}

// Read returns the next binary message; it is valid until the next Read.
// A larger message than the bound is runnerapi.ErrFrameTooLarge; a text
// message, ErrTextMessage.
func (r *Reader) Read() ([]byte, error) {
	t, rd, err := r.c.NextReader()
	if err != nil {
		return nil, readErr(err)
	}
	if t != websocket.BinaryMessage {
		return nil, ErrTextMessage
	}
	if r.buf == nil {
		r.buf = make([]byte, runnerapi.MaxSessionMessage)
	}
	n := 0
	for {
		if n == len(r.buf) {
			// Full: the read limit fails the next byte, if there is one.
			var one [1]byte
			m, err := rd.Read(one[:])
			switch {
			case m > 0:
				return nil, runnerapi.ErrFrameTooLarge
			case errors.Is(err, io.EOF):
				return r.buf[:n], nil
			case err != nil:
				return nil, readErr(err)
			}
			continue
		}
		m, err := rd.Read(r.buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return r.buf[:n], nil
		}
		if err != nil {
			return nil, readErr(err)
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, websocket.ErrReadLimit) {
		return runnerapi.ErrFrameTooLarge
	}
	return err
}

// WriteFrame writes one frame of type t as one message, without copying
// payload into a frame of its own. Writes to c must not overlap.
func WriteFrame(c *websocket.Conn, t runnerapi.FrameType, payload []byte) error {
	w, err := c.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	head := [1]byte{byte(t)}
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	return w.Close()
}

// CloseWait bounds the last frame and the close message to a peer that
// stopped reading.
const CloseWait = time.Second

// Close ends a session on c: the end as its last frame, then a close
// message with the end's close code, then the connection. It bounds
// itself to CloseWait when the peer stopped reading. Writes to c must not
// overlap with it.
func Close(c *websocket.Conn, end runnerapi.SessionEnd) {
	_ = c.SetWriteDeadline(time.Now().Add(CloseWait))
	_ = c.WriteMessage(websocket.BinaryMessage, runnerapi.JSONFrame(runnerapi.FrameEnd, end))
	reason := end.Reason
	if len(reason) > 120 { // a close message's reason: at most 123 bytes
		reason = reason[:120]
	}
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(end.CloseCode(), reason), time.Now().Add(CloseWait))
	_ = c.Close()
}
