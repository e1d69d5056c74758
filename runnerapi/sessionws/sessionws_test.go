package sessionws_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/runnerapi"
	"github.com/runmesh/runmesh/runnerapi/sessionws"
)

// pair is a server and a client end of one WebSocket.
func pair(t *testing.T) (server, client *websocket.Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		got <- c
	}))
	t.Cleanup(srv.Close)
	client, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	server = <-got
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// Frames of every size up to the bound arrive whole, in order; the
// reader's buffer is reused, so each is checked before the next read.
func TestFramesArriveWholeUpToTheBound(t *testing.T) {
	server, client := pair(t)
	sizes := []int{0, 1, 4095, 4096, 4097, runnerapi.MaxFramePayload - 1, runnerapi.MaxFramePayload, 7}
	go func() {
		for i, n := range sizes {
			if err := sessionws.WriteFrame(client, runnerapi.FrameStdin, bytes.Repeat([]byte{byte('a' + i)}, n)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	r := sessionws.NewReader(server)
	for i, n := range sizes {
		msg, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		f, err := runnerapi.ParseFrame(msg)
		if err != nil || f.Type != runnerapi.FrameStdin || !bytes.Equal(f.Payload, bytes.Repeat([]byte{byte('a' + i)}, n)) {
			t.Fatalf("frame %d: %d bytes of %q (%v), want %d", i, len(f.Payload), f.Payload[:min(len(f.Payload), 4)], err, n)
		}
	}
}

func TestAFrameOverTheBoundIsRefused(t *testing.T) {
	server, client := pair(t)
	go func() {
		_ = client.WriteMessage(websocket.BinaryMessage, runnerapi.AppendFrame(nil, runnerapi.FrameStdin, make([]byte, runnerapi.MaxFramePayload+1)))
	}()
	if _, err := sessionws.NewReader(server).Read(); !errors.Is(err, runnerapi.ErrFrameTooLarge) {
		t.Fatalf("read %v, want ErrFrameTooLarge", err)
	}
}

func TestATextMessageIsRefused(t *testing.T) {
	server, client := pair(t)
	go func() { _ = client.WriteMessage(websocket.TextMessage, []byte("hello")) }()
	if _, err := sessionws.NewReader(server).Read(); !errors.Is(err, sessionws.ErrTextMessage) {
		t.Fatalf("read %v, want ErrTextMessage", err)
	}
}

// Close sends the end, then a close message with its code.
func TestCloseSaysWhy(t *testing.T) {
	server, client := pair(t)
	go sessionws.Close(server, runnerapi.SessionEnd{Code: runnerapi.EndRevoked, Reason: strings.Repeat("r", 200)})
	r := sessionws.NewReader(client)
	msg, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	var end runnerapi.SessionEnd
	if f, err := runnerapi.ParseFrame(msg); err != nil || f.Type != runnerapi.FrameEnd || f.Decode(&end) != nil || end.Code != runnerapi.EndRevoked {
		t.Fatalf("last frame %q", msg)
	}
	_, err = r.Read()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4403 || len(ce.Text) != 120 {
		t.Fatalf("close %v, want 4403 with the reason cut to 120 bytes", err)
	}
}
