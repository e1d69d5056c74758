package runtime

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/sirupsen/logrus"
)

// podmanAPI is the runmesh user's podman service (its socket-activated
// podman.socket), reached through podman's own bindings: everything the
// agent asks podman but the job's own process, which is its unit's.
type podmanAPI struct {
	uri    string
	socket string

	mu sync.Mutex
	// conn holds the bindings' connection as a context value; nil until
	// the service first answered. Only its values are used: each call's
	// deadline and cancellation are the caller's.
	conn context.Context
}

// connectTimeout bounds reaching the service: socket activation starts it
// on the first connection.
const connectTimeout = 30 * time.Second

func init() {
	// The bindings log through logrus; the agent logs what they return.
	logrus.SetOutput(io.Discard)
}

func newPodmanAPI(socket string) *podmanAPI {
	return &podmanAPI{uri: "unix://" + socket, socket: socket}
}

// with gives ctx the service's connection, reaching the service first
// when it has not answered yet.
func (p *podmanAPI) with(ctx context.Context) (context.Context, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		cctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		conn, err := bindings.NewConnection(cctx, p.uri)
		if err != nil {
			return nil, &APIError{URI: p.uri, Err: err}
		}
		p.conn = conn
	}
	return withValues{Context: ctx, values: p.conn}, nil
}

// withValues is ctx, with the values of another context behind its own.
type withValues struct {
	context.Context
	values context.Context
}

func (c withValues) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// APIError: podman's service did not answer.
type APIError struct {
	URI string
	Err error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("podman's API at %s: %v (is the runmesh user's podman.socket enabled? systemctl --user enable --now podman.socket)", e.URI, e.Err)
}

func (e *APIError) Unwrap() error { return e.Err }

// Ping reaches the service, starting it through its socket.
func (r *Local) Ping(ctx context.Context) error {
	_, err := r.api.with(ctx)
	return err
}
