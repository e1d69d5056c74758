package graph

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
)

type principalKey struct{}

// withPrincipal records who is calling.
func withPrincipal(ctx context.Context, a record.Admin) context.Context {
	return context.WithValue(ctx, principalKey{}, a)
}

// principal is who is calling. Every request that reaches a resolver has
// one: the HTTP and websocket entry points refuse requests without.
func principal(ctx context.Context) (record.Admin, bool) {
	a, ok := ctx.Value(principalKey{}).(record.Admin)
	return a, ok
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// requireAdmin answers 401, with no detail, to any request without a live
// admin token. Websocket upgrades pass: they authenticate in the
// connection_init message, because browsers cannot set headers on them.
func requireAdmin(t *tenancy.Service, logins *loginLimit, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebsocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		remote := remoteHost(r.RemoteAddr)
		if !logins.allowed(remote) {
			// Without a token lookup: guessing costs the guesser alone.
			w.Header().Set("Retry-After", "60")
			writeJSONError(w, http.StatusTooManyRequests, "TOO_MANY_REQUESTS", "too many failed logins from this address")
			return
		}
		a, err := t.Authenticate(r.Context(), bearer(r))
		if errors.Is(err, tenancy.ErrUnauthenticated) {
			logins.failed(remote)
			w.Header().Set("WWW-Authenticate", `Bearer realm="runmesh"`)
			writeJSONError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "unauthenticated")
			return
		}
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeJSONError(w, http.StatusServiceUnavailable, CodeUnavailable, "the token could not be checked; send the request again")
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), a)))
	})
}

func isWebsocketUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
