// Package controlplane is the runmesh server: its listeners and handlers,
// wired to the store. The admin listener serves the GraphQL API
// (/graphql, /playground), /metrics and /healthz.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/runmesh/runmesh/controlplane/store"
	"github.com/runmesh/runmesh/graph"
)

// Version is set at build time (-ldflags "-X ...controlplane.Version=...").
var Version = "dev"

// Options configure a Server.
type Options struct {
	Store *store.Store
	Log   *slog.Logger
	// AdminAddr is where the admin listener binds (":0" picks a port).
	AdminAddr string
	// AdminTLS, when set, serves the admin listener over TLS.
	AdminTLS *tls.Config
	Defaults graph.Defaults
}

// Server is a running control plane. Start it, then Stop it.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	admin   *http.Server
	adminLn net.Listener
	serving chan error
}

// New builds a server; it binds nothing until Start.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: o, log: o.Log.With("component", "controlplane"), metrics: newMetrics(Version)}
	mux := http.NewServeMux()
	mux.Handle("/graphql", s.metrics.instrument("admin", "/graphql", graph.NewHandler(graph.Options{
		Store:    o.Store,
		Log:      o.Log.With("component", "graphql"),
		Defaults: o.Defaults,
	})))
	mux.Handle("GET /playground", graph.PlaygroundHandler("/graphql"))
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /healthz", s.healthz)
	s.admin = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         o.AdminTLS,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s
}

// Start binds the listeners and begins serving. When it returns nil the
// server accepts connections.
func (s *Server) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	s.adminLn = ln
	s.serving = make(chan error, 1)
	go func() {
		var err error
		if s.opts.AdminTLS != nil {
			err = s.admin.ServeTLS(ln, "", "")
		} else {
			err = s.admin.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serving <- err
	}()
	s.log.Info("admin listener up", "addr", ln.Addr().String(), "tls", s.opts.AdminTLS != nil)
	return nil
}

// AdminAddr is the bound admin address.
func (s *Server) AdminAddr() net.Addr { return s.adminLn.Addr() }

// Done reports a listener that stopped serving on its own.
func (s *Server) Done() <-chan error { return s.serving }

// Stop stops accepting, lets requests in flight finish until ctx ends, then
// closes what is left.
func (s *Server) Stop(ctx context.Context) error {
	err := s.admin.Shutdown(ctx)
	if err != nil {
		s.admin.Close()
	}
	return err
}

// Healthy is the server's health: it answers when its database does.
func (s *Server) Healthy(ctx context.Context) error { return s.opts.Store.Ping(ctx) }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := s.Healthy(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "database: unavailable")
		return
	}
	fmt.Fprintln(w, "ok")
}
