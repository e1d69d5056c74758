package graph

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/runmesh/runmesh/controlplane/tenancy"
)

// Close codes of the graphql-transport-ws protocol a client must not
// answer by reconnecting at once.
const (
	closeForbidden       = 4403 // connection_init refused; a token that expired or was revoked
	closeInitTimeout     = 4408 // no connection_init in time
	closeTooManyRequests = 4429 // too many failed logins from the address
)

// Defaults of a socket's bounds.
const (
	DefaultSocketInitTimeout = 10 * time.Second
	DefaultSocketRecheck     = 10 * time.Second
)

// socket is what the admin API knows of one websocket: where it came from,
// its connection (to close with a code of ours), and whether it has
// authenticated.
type socket struct {
	remote string
	mu     sync.Mutex
	conn   transport.WebsocketConn
}

type socketKey struct{}

// withSocket gives a websocket upgrade a socket record in its context, for
// the transport's accept and init to fill in.
func withSocket(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebsocketUpgrade(r) {
			r = r.WithContext(context.WithValue(r.Context(), socketKey{}, &socket{remote: remoteHost(r.RemoteAddr)}))
		}
		next.ServeHTTP(w, r)
	})
}

func socketFrom(ctx context.Context) *socket { s, _ := ctx.Value(socketKey{}).(*socket); return s }

func remoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// closeWith ends the socket with code and reason.
func (s *socket) closeWith(code int, reason string) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.WriteClose(code, reason)
		_ = c.Close()
	}
}

// socketCodes is gqlgen's websocket implementation, with the close codes
// of the protocol where gqlgen has generic ones, and each connection
// recorded in its socket.
type socketCodes struct {
	inner transport.WebsocketImplementation
}

func (s socketCodes) Accept(w http.ResponseWriter, r *http.Request, o transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	c, err := s.inner.Accept(w, r, o)
	if err != nil {
		return c, err
	}
	wrapped := &closeCodes{WebsocketConn: c}
	if sock := socketFrom(r.Context()); sock != nil {
		sock.mu.Lock()
		sock.conn = wrapped
		sock.mu.Unlock()
	}
	return wrapped, nil
}

type closeCodes struct{ transport.WebsocketConn }

func (c *closeCodes) WriteClose(code int, msg string) error {
	if code == transport.WebsocketCloseProtocolError && msg == "connection initialisation timeout" {
		code = closeInitTimeout
	}
	return c.WebsocketConn.WriteClose(code, msg)
}

func (c *closeCodes) SetReadLimit(n int64) {
	if l, ok := c.WebsocketConn.(transport.WebsocketReadLimiter); ok {
		l.SetReadLimit(n)
	}
}

func (c *closeCodes) SetReadDeadline(t time.Time) error {
	if d, ok := c.WebsocketConn.(transport.WebsocketReadDeadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// socketInit authenticates a socket's connection_init. A refusal closes it
// with 4403 (4429 past the failed-login bound), so stock clients do not
// reconnect at once; an accepted socket has its token checked again every
// recheck, and is closed with 4403 once it expired or was revoked.
func socketInit(t *tenancy.Service, logins *loginLimit, recheck time.Duration, log *slog.Logger) transport.WebsocketInitFunc {
	return func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		token := p.Authorization()
		if token == "" {
			token, _ = p["authToken"].(string)
		}
		if tok, ok := cutBearer(token); ok {
			token = tok
		}
		sock := socketFrom(ctx)
		remote := ""
		if sock != nil {
			remote = sock.remote
		}
		if !logins.allowed(remote) {
			return transport.WithWebsocketCloseCode(ctx, closeTooManyRequests), nil, errors.New("too many failed logins")
		}
		a, err := t.Authenticate(ctx, token)
		if err != nil {
			if errors.Is(err, tenancy.ErrUnauthenticated) {
				logins.failed(remote)
			}
			return transport.WithWebsocketCloseCode(ctx, closeForbidden), nil, errors.New("unauthenticated")
		}
		if sock != nil {
			go watchToken(ctx, t, a.TokenID.String(), token, recheck, func() {
				log.InfoContext(ctx, "closing a socket whose token expired or was revoked", "remote", sock.remote)
				sock.closeWith(closeForbidden, "the token expired or was revoked")
			})
		}
		// Every operation on the socket checks the token again as well.
		return context.WithValue(withPrincipal(ctx, a), socketTokenKey{}, token), nil, nil
	}
}

// watchToken calls revoked once the token (id tokenID) no longer
// authenticates: checked when any replica revokes it, and every recheck
// (for expiry), until ctx ends.
func watchToken(ctx context.Context, t *tenancy.Service, tokenID, token string, recheck time.Duration, revoked func()) {
	watch := t.WatchTokens()
	defer watch.Close()
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case id := <-watch.Revoked():
			if id != "" && id != tokenID {
				continue // another token
			}
		}
		if _, err := t.Authenticate(ctx, token); errors.Is(err, tenancy.ErrUnauthenticated) {
			revoked()
			return
		}
	}
}

// loginLimit bounds failed logins per address: past max in a window, an
// address is refused without a token lookup until the window ends.
type loginLimit struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	seen   map[string]*failures
}

type failures struct {
	n     int
	since time.Time
}

// DefaultFailedLogins failed logins an address may make a minute.
const DefaultFailedLogins = 20

func newLoginLimit(max int, window time.Duration) *loginLimit {
	return &loginLimit{max: max, window: window, seen: map[string]*failures{}}
}

func (l *loginLimit) allowed(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.seen[addr]
	if !ok {
		return true
	}
	if time.Since(f.since) >= l.window {
		delete(l.seen, addr)
		return true
	}
	return f.n < l.max
}

func (l *loginLimit) failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.seen) > 10000 { // forget the stale ones first
		for a, f := range l.seen {
			if now.Sub(f.since) >= l.window {
				delete(l.seen, a)
			}
		}
	}
	f, ok := l.seen[addr]
	if !ok || now.Sub(f.since) >= l.window {
		l.seen[addr] = &failures{n: 1, since: now}
		return
	}
	f.n++
}
