package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/Khan/genqlient/graphql"
	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/runmesh/runmesh/cmd/runmesh/internal/api"
)

// app is what the commands share: the streams, the environment, the
// global flags and, once a command needs it, the connection.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	flags          globalFlags
	running        *cobra.Command // the command that runs

	ep   *endpoint
	http *http.Client
}

// connect resolves the endpoint and makes the HTTP client, once.
func (a *app) connect() error {
	if a.ep != nil {
		return nil
	}
	e, err := a.endpoint()
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if e.caFile != "" {
		roots, err := caPool(e.caFile)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	a.ep, a.http = &e, &http.Client{Transport: bearer{token: e.token, next: tr}}
	return nil
}

func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificates", path)
	}
	return roots, nil
}

// bearer sends the token with every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// gql is the typed client for queries and mutations.
func (a *app) gql() (graphql.Client, error) {
	if err := a.connect(); err != nil {
		return nil, err
	}
	return graphql.NewClient(a.ep.url+"/graphql", a.http), nil
}

// call runs one generated operation with the global timeout, and makes its
// errors readable.
func call[T any](ctx context.Context, a *app, op func(context.Context, graphql.Client) (*T, error)) (*T, error) {
	c, err := a.gql()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.flags.timeout)
	defer cancel()
	out, err := op(ctx, c)
	return out, readable(err)
}

// readable turns the API's errors into one line each, with their codes:
// "pool not found (NOT_FOUND)".
func readable(err error) error {
	if err == nil {
		return nil
	}
	var list gqlerror.List
	if errors.As(err, &list) {
		msgs := make([]string, len(list))
		for i, e := range list {
			code, _ := e.Extensions["code"].(string)
			msgs[i] = fmt.Sprintf("%s (%s)", e.Message, code)
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	var h *graphql.HTTPError
	if errors.As(err, &h) {
		if h.StatusCode == http.StatusUnauthorized {
			return errors.New("the admin API refused the token (401): it is wrong, expired or revoked")
		}
		return fmt.Errorf("the admin API answered HTTP %d", h.StatusCode)
	}
	return err
}

// subscribe opens a websocket to the API (graphql-transport-ws, the token
// in connection_init), starts a generated subscription on it, and calls
// each for every item until the server completes it or ctx ends.
func subscribe[R any](ctx context.Context, a *app, start func(context.Context, graphql.WebSocketClient) (<-chan R, string, error), each func(R) error) error {
	if err := a.connect(); err != nil {
		return err
	}
	url := "ws" + strings.TrimPrefix(a.ep.url, "http") + "/graphql"
	dialer := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: a.flags.timeout}
	if tr, ok := a.http.Transport.(bearer).next.(*http.Transport); ok {
		dialer.TLSClientConfig = tr.TLSClientConfig
	}
	ws := graphql.NewClientUsingWebSocket(url, wsDialer{dialer},
		graphql.WithConnectionParams(map[string]any{"Authorization": "Bearer " + a.ep.token}))
	errs, err := ws.Start(ctx)
	if err != nil {
		return fmt.Errorf("open the subscription: %w", err)
	}
	defer ws.Close()
	items, _, err := start(ctx, ws)
	if err != nil {
		return readable(err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			var closed *websocket.CloseError
			if errors.As(err, &closed) && closed.Code == 4403 {
				return errors.New("the admin API closed the subscription: the token expired or was revoked")
			}
			return readable(err)
		case r, ok := <-items:
			if !ok {
				return nil // completed
			}
			if err := each(r); err != nil {
				return err
			}
		}
	}
}

type wsDialer struct{ d *websocket.Dialer }

func (w wsDialer) DialContext(ctx context.Context, url string, h http.Header) (graphql.WSConn, error) {
	c, _, err := w.d.DialContext(ctx, url, h)
	return c, err
}

// poolID takes a pool id, or a pool name that is unambiguous among the
// pools the caller sees.
func (a *app) poolID(ctx context.Context, pool string) (string, error) {
	if looksLikeID(pool) {
		return pool, nil
	}
	out, err := call(ctx, a, func(ctx context.Context, c graphql.Client) (*api.PoolsResponse, error) {
		return api.Pools(ctx, c, nil, nil)
	})
	if err != nil {
		return "", err
	}
	var ids []string
	for _, p := range out.Pools {
		if p.Name == pool {
			ids = append(ids, p.Id)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no pool named %q", pool)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("%d pools are named %q: give the id (runmesh pools)", len(ids), pool)
}

func looksLikeID(s string) bool { return len(s) == 36 && strings.Count(s, "-") == 4 }
