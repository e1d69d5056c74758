package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/runmesh/runmesh/runnerapi"
)

// LendPath is the route on a replica's runner listener where another
// replica asks for the stream standing there for a lease
// (LendPath+"{id}/session?attempt=N"), with its replica certificate.
const LendPath = "/v1/relay/leases/"

// Peers is the Elsewhere of a replica among others: it asks each replica
// up now, over mutual TLS, for the lease's stream.
type Peers struct {
	// List is the other replicas' relay URLs (their runner listeners,
	// https://host:port), the most likely first.
	List func(context.Context) ([]string, error)
	// TLS carries this replica's client certificate and the CA root the
	// others' listeners are verified against.
	TLS *tls.Config
	// DialTimeout bounds asking one replica (default 2 s).
	DialTimeout time.Duration
	// Log hears of replicas that could not be asked (nil: nobody).
	Log *slog.Logger
}

// Take asks the other replicas in turn; the first that has the lease's
// stream standing lends it.
func (p *Peers) Take(ctx context.Context, lease uuid.UUID, attempt int) (Conn, error) {
	urls, err := p.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	timeout := p.DialTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	d := websocket.Dialer{
		TLSClientConfig:  p.TLS,
		HandshakeTimeout: timeout,
		ReadBufferSize:   runnerapi.MaxSessionMessage,
		WriteBufferSize:  runnerapi.MaxSessionMessage,
	}
	var errs []error
	for _, base := range urls {
		u := "wss://" + strings.TrimPrefix(strings.TrimSuffix(base, "/"), "https://") + LendPath + lease.String() +
			"/session?attempt=" + strconv.Itoa(attempt)
		dctx, cancel := context.WithTimeout(ctx, timeout)
		c, resp, err := d.DialContext(dctx, u, nil)
		cancel()
		if err == nil {
			return WebSocket(c), nil
		}
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			continue // none stands there
		}
		if resp != nil {
			err = fmt.Errorf("%w (HTTP %d)", err, resp.StatusCode)
		}
		errs = append(errs, fmt.Errorf("%s: %w", base, err))
		if p.Log != nil {
			p.Log.Warn("ask a replica for a session's stream", "replica", base, "err", err)
		}
	}
	return nil, errors.Join(errs...)
}
