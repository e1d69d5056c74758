package controlplane

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/runmesh/runmesh/internal/health"
)

// DefaultHealthInterval is how often a server checks its conditions when
// nobody asks; /healthz and Healthy check on demand as well.
const DefaultHealthInterval = 10 * time.Second

const (
	// pingTimeout bounds one database check: a database that takes longer
	// to answer a ping is not one requests can use.
	pingTimeout = 2 * time.Second
	// caWarning is how long before the root or the intermediate expires the
	// server starts saying so: rotating a CA means re-pinning every runner.
	caWarning = 30 * 24 * time.Hour
)

// serverHealth is a server's conditions in its registry.
type serverHealth struct {
	reg *health.Registry
	// check serialises checks, so that an older result never overwrites a
	// newer one, and guards listenerErr.
	check       sync.Mutex
	database    *health.Condition
	ca          *health.Condition
	runnerCert  *health.Condition
	expiring    *health.Condition
	listeners   *health.Condition
	listenerErr [2]error // admin, runner
}

func newServerHealth(reg *health.Registry) *serverHealth {
	if reg == nil {
		reg = health.NewRegistry()
	}
	return &serverHealth{
		reg:        reg,
		database:   reg.Register("database", "database reachable", health.Error),
		listeners:  reg.Register("listeners", "admin and runner listeners serving", health.Error),
		ca:         reg.Register("ca", "CA root and intermediate valid", health.Error),
		runnerCert: reg.Register("runner_certificate", "runner listener certificate valid", health.Error),
		expiring:   reg.Register("certificates_expiring", "certificates not near expiry", health.Warning),
	}
}

// Health is the server's registry of conditions: what /healthz, the
// GraphQL health field and sd_notify STATUS= show.
func (s *Server) Health() *health.Registry { return s.health.reg }

// Healthy checks the server's conditions now; it is nil unless every
// condition of severity error is healthy.
func (s *Server) Healthy(ctx context.Context) error {
	s.checkHealth(ctx)
	return s.health.reg.Err()
}

// Alive is what the systemd watchdog is told: the process serves. It is
// nil while both listeners serve, whatever the database or the CA say: a
// restart cures neither, and restarting every replica while its database is
// away would only add to an outage. Those belong in health and STATUS=.
func (s *Server) Alive(context.Context) error {
	if st := s.health.listeners.Status(); !st.OK {
		return fmt.Errorf("listeners: %s", st.Text)
	}
	return nil
}

// watchHealth checks on a pace until ctx ends, so that STATUS= and the API
// follow the server even when nobody polls /healthz.
func (s *Server) watchHealth(ctx context.Context) {
	t := time.NewTicker(s.opts.HealthInterval)
	defer t.Stop()
	for {
		s.checkHealth(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) checkHealth(ctx context.Context) {
	h := s.health
	h.check.Lock()
	defer h.check.Unlock()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := s.opts.Store.Ping(pctx)
	cancel()
	h.database.SetErr(err, "answers")

	now := time.Now()
	h.ca.Set(caValid(now, s.opts.CA.Root, s.opts.CA.Intermediate))
	var leaf *x509.Certificate
	if c := s.cert.current.Load(); c != nil {
		leaf = c.Leaf
	}
	h.runnerCert.Set(certValid(now, "runner listener certificate", leaf))
	h.expiring.Set(notExpiring(now, s.opts.CA.Root, s.opts.CA.Intermediate, leaf))
}

// listening marks the listeners serving; listenerStopped, one of them not.
func (s *Server) listening() {
	h := s.health
	h.check.Lock()
	defer h.check.Unlock()
	h.listenerErr = [2]error{}
	h.listeners.SetHealthy(fmt.Sprintf("admin on %s, runner on %s", s.adminLn.Addr(), s.runnerLn.Addr()))
}

func (s *Server) listenerStopped(srv *http.Server, err error) {
	h := s.health
	h.check.Lock()
	defer h.check.Unlock()
	i, name := 1, "runner"
	if srv == s.admin {
		i, name = 0, "admin"
	}
	h.listenerErr[i] = fmt.Errorf("%s listener stopped", name)
	if err != nil {
		h.listenerErr[i] = fmt.Errorf("%s listener stopped: %w", name, err)
	}
	var why []string
	for _, e := range h.listenerErr {
		if e != nil {
			why = append(why, e.Error())
		}
	}
	h.listeners.SetUnhealthy(strings.Join(why, "; "))
}

func caValid(now time.Time, root, intermediate *x509.Certificate) (bool, string) {
	for _, c := range []struct {
		name string
		cert *x509.Certificate
	}{{"CA root", root}, {"CA intermediate", intermediate}} {
		if ok, text := certValid(now, c.name, c.cert); !ok {
			return false, text
		}
	}
	return true, fmt.Sprintf("root until %s, intermediate until %s", stamp(root.NotAfter), stamp(intermediate.NotAfter))
}

func certValid(now time.Time, name string, c *x509.Certificate) (bool, string) {
	switch {
	case c == nil:
		return false, name + " not issued yet"
	case now.Before(c.NotBefore):
		return false, fmt.Sprintf("%s not valid before %s", name, stamp(c.NotBefore))
	case !now.Before(c.NotAfter):
		return false, fmt.Sprintf("%s expired at %s", name, stamp(c.NotAfter))
	}
	return true, "until " + stamp(c.NotAfter)
}

// notExpiring warns ahead of the failures caValid and certValid report:
// the CA within caWarning of its end, and the listener's certificate once
// its renewal, due at two thirds of its life, is half its remaining time late.
func notExpiring(now time.Time, root, intermediate, listener *x509.Certificate) (bool, string) {
	var soon []string
	for _, c := range []struct {
		name string
		cert *x509.Certificate
	}{{"CA root", root}, {"CA intermediate", intermediate}} {
		if c.cert.NotAfter.Sub(now) < caWarning {
			soon = append(soon, fmt.Sprintf("%s expires at %s", c.name, stamp(c.cert.NotAfter)))
		}
	}
	if listener != nil {
		life := listener.NotAfter.Sub(listener.NotBefore)
		if now.After(listener.NotBefore.Add(life * 5 / 6)) {
			soon = append(soon, fmt.Sprintf("runner listener certificate expires at %s and is not renewed yet", stamp(listener.NotAfter)))
		}
	}
	if len(soon) > 0 {
		return false, strings.Join(soon, "; ")
	}
	return true, ""
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// healthz answers 200 while the server is healthy and 503 otherwise, with
// every condition: one line each, or JSON when the client asks for it. It
// is unauthenticated, so it shows no condition's text, only its verdict:
// the texts (database errors among them) are for the API and the journal.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.checkHealth(r.Context())
	conds := s.health.reg.Conditions()
	code := http.StatusOK
	if health.Err(conds) != nil {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	if acceptsJSON(r.Header.Values("Accept")) {
		type cond struct {
			Name     string          `json:"name"`
			OK       bool            `json:"ok"`
			Severity health.Severity `json:"severity"`
			Title    string          `json:"title"`
		}
		out := struct {
			Healthy    bool   `json:"healthy"`
			Conditions []cond `json:"conditions"`
		}{Healthy: code == http.StatusOK, Conditions: []cond{}}
		for _, c := range conds {
			out.Conditions = append(out.Conditions, cond{Name: c.Name, OK: c.OK, Severity: c.Severity, Title: c.Title})
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(out)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	for _, c := range conds {
		verdict := "ok"
		if !c.OK {
			verdict = "unhealthy"
		}
		fmt.Fprintf(w, "%s: %s: %s\n", c.Name, verdict, c.Title)
	}
}

// acceptsJSON is whether an Accept header names application/json; the
// plain-text body stays the default, for curl and load balancers.
func acceptsJSON(accept []string) bool {
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == "application/json" {
				return true
			}
		}
	}
	return false
}
